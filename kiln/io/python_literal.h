#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::io {

// Note [python literals]: formats that store a Python literal (NumPy's .npy header, a
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } dict that NumPy reads with
// ast.literal_eval) are parsed here, by hand, so that loading never evaluates anything. The
// grammar is the subset such writers produce: strings in single or double quotes with the escapes
// \\ \' \" \n \t, decimal integers that fit in int64 (with Python 2's L suffix, which old NumPy
// wrote), True, False, None, and tuples, lists and dicts with optional trailing commas; "(x)" is
// x, as in Python. Anything else is an error naming its byte offset. Nesting and the number of
// values are capped, so hostile input cannot grow the parser's stack or memory without bound.
// The parser works on bytes: every valid token is ASCII, so latin-1 and UTF-8 texts read alike
// (the bytes of strings are kept as they are).

struct PyLiteral {
  enum class Kind { kString, kInt, kBool, kNone, kTuple, kList, kDict };
  Kind kind = Kind::kNone;
  uint64_t offset = 0;           // byte offset of its first character (see parse_py_literal)
  std::string text;              // kString
  int64_t number = 0;            // kInt
  bool flag = false;             // kBool
  std::vector<PyLiteral> items;  // kTuple, kList; kDict: key, value, key, value, ... in order
};

// A syntax error; its text reads "expected ',' or '}' after a dict entry at byte offset 57, but
// got 'x'", for the caller to prefix with what was being read.
class PyLiteralError : public Error {
 public:
  using Error::Error;
};

// Parses `text` as one literal, with only whitespace around it. `base` is the offset of text[0]
// in its file, so that offsets in messages and in the result are file offsets.
PyLiteral parse_py_literal(std::string_view text, uint64_t base = 0);

// The literal as Python's repr() prints it, clipped to about max_chars (it may come from a
// hostile file).
std::string py_repr(const PyLiteral& v, size_t max_chars = 80);

// Untrusted bytes as the inside of a Python string literal: printable ASCII as it is, \\ and \',
// other bytes as \xNN; clipped to max_chars input bytes, with "..." when longer.
std::string py_escape(std::string_view bytes, size_t max_chars = 80);

}  // namespace kiln::io
