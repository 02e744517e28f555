#include "kiln/io/python_literal.h"

#include <fmt/format.h>

#include <cstring>

namespace kiln::io {

namespace {

using Kind = PyLiteral::Kind;

// A valid .npy header nests two levels and holds a handful of values.
constexpr int kMaxDepth = 16;
constexpr size_t kMaxValues = 65536;

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || is_digit(c);
}

std::string show_char(char c) {
  return "'" + py_escape(std::string_view(&c, 1)) + "'";
}

void append_repr(const PyLiteral& v, std::string& out, size_t max_chars) {
  if (out.size() > max_chars) return;  // the caller clips; the rest would be cut anyway
  switch (v.kind) {
    case Kind::kString:
      out += "'" + py_escape(v.text, max_chars) + "'";
      return;
    case Kind::kInt:
      out += std::to_string(v.number);
      return;
    case Kind::kBool:
      out += v.flag ? "True" : "False";
      return;
    case Kind::kNone:
      out += "None";
      return;
    case Kind::kTuple:
    case Kind::kList:
    case Kind::kDict:
      break;
  }
  const bool dict = v.kind == Kind::kDict;
  out += v.kind == Kind::kTuple ? '(' : v.kind == Kind::kList ? '[' : '{';
  for (size_t i = 0; i < v.items.size(); ++i) {
    out += i == 0 ? "" : (dict && i % 2 == 1) ? ": " : ", ";
    append_repr(v.items[i], out, max_chars);
  }
  if (v.kind == Kind::kTuple && v.items.size() == 1) out += ',';
  out += v.kind == Kind::kTuple ? ')' : v.kind == Kind::kList ? ']' : '}';
}

class Parser {
 public:
  Parser(std::string_view text, uint64_t base) : text_(text), base_(base) {}

  PyLiteral parse() {
    skip_space();
    PyLiteral v = parse_value(0);
    skip_space();
    if (!at_end()) expected("nothing more (only whitespace may follow the literal)");
    return v;
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return text_[pos_]; }
  uint64_t offset() const { return base_ + pos_; }
  bool next_is(char c) const { return !at_end() && peek() == c; }
  // A literal of `kind` that begins here.
  PyLiteral start(Kind kind) const {
    PyLiteral v;
    v.kind = kind;
    v.offset = offset();
    return v;
  }

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw PyLiteralError(fmt::format(f, std::forward<Args>(args)...));
  }
  [[noreturn]] void expected(std::string_view what) const {
    fail("expected {} at byte offset {}, but {}", what, offset(),
         at_end() ? std::string("the text ends there") : "got " + show_char(peek()));
  }

  void skip_space() {
    while (!at_end() && peek() != '\0' && std::strchr(" \t\n\r\f\v", peek()) != nullptr) ++pos_;
  }

  PyLiteral parse_value(int depth) {
    if (++values_ > kMaxValues)
      fail("more than {} values (at byte offset {}) are more than kiln reads", kMaxValues,
           offset());
    if (depth > kMaxDepth)
      fail("containers nest deeper than {} levels at byte offset {}", kMaxDepth, offset());
    if (at_end()) expected("a value");
    const char c = peek();
    if (c == '{') return parse_dict(depth);
    if (c == '(') return parse_sequence(depth, Kind::kTuple, ')');
    if (c == '[') return parse_sequence(depth, Kind::kList, ']');
    if (c == '\'' || c == '"') return parse_string();
    if (c == '-' || is_digit(c)) return parse_int();
    if (is_name_char(c)) return parse_name();
    expected("a value");
  }

  PyLiteral parse_dict(int depth) {
    PyLiteral v = start(Kind::kDict);
    ++pos_;
    for (;;) {
      skip_space();
      if (next_is('}')) break;
      if (at_end()) expected("a key or '}'");
      v.items.push_back(parse_value(depth + 1));
      skip_space();
      if (!next_is(':')) expected("':' after the dict key");
      ++pos_;
      skip_space();
      v.items.push_back(parse_value(depth + 1));
      skip_space();
      if (!next_is(',')) {
        if (!next_is('}')) expected("',' or '}' after a dict entry");
        break;
      }
      ++pos_;
    }
    ++pos_;
    return v;
  }

  PyLiteral parse_sequence(int depth, Kind kind, char close) {
    PyLiteral v = start(kind);
    ++pos_;
    bool comma = false;
    for (;;) {
      skip_space();
      if (next_is(close)) break;
      v.items.push_back(parse_value(depth + 1));
      skip_space();
      if (!next_is(',')) {
        if (!next_is(close)) expected(fmt::format("',' or '{}'", close));
        break;
      }
      ++pos_;
      comma = true;
    }
    ++pos_;
    // In Python "(3)" is the integer 3; only "(3,)" is a tuple.
    if (kind == Kind::kTuple && v.items.size() == 1 && !comma) return std::move(v.items[0]);
    return v;
  }

  PyLiteral parse_string() {
    PyLiteral v = start(Kind::kString);
    const char quote = text_[pos_++];
    for (;;) {
      // A quoted string cannot span lines.
      if (at_end() || peek() == '\n')
        fail("the string starting at byte offset {} is not terminated", v.offset);
      const char c = text_[pos_++];
      if (c == quote) return v;
      if (c != '\\') {
        v.text += c;
        continue;
      }
      if (at_end()) continue;  // reported as unterminated above
      const char e = text_[pos_++];
      if (e == '\\' || e == '\'' || e == '"')
        v.text += e;
      else if (e == 'n')
        v.text += '\n';
      else if (e == 't')
        v.text += '\t';
      else
        fail("unsupported escape sequence '\\{}' at byte offset {}", py_escape({&e, 1}),
             offset() - 2);
    }
  }

  PyLiteral parse_int() {
    PyLiteral v = start(Kind::kInt);
    const bool negative = next_is('-');
    if (negative) ++pos_;
    if (at_end() || !is_digit(peek())) expected("a digit");
    // Accumulated as a magnitude so that -2^63 fits.
    uint64_t magnitude = 0;
    const uint64_t limit = negative ? uint64_t{1} << 63 : uint64_t{INT64_MAX};
    while (!at_end() && is_digit(peek())) {
      const auto digit = static_cast<uint64_t>(peek() - '0');
      if (magnitude > (limit - digit) / 10)
        fail("the integer at byte offset {} does not fit in 64 bits", v.offset);
      magnitude = magnitude * 10 + digit;
      ++pos_;
    }
    if (next_is('L') || next_is('l')) ++pos_;
    if (!at_end() && (is_name_char(peek()) || peek() == '.'))
      fail("unsupported number at byte offset {} (only decimal integers are read)", v.offset);
    v.number = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
    return v;
  }

  PyLiteral parse_name() {
    PyLiteral v = start(Kind::kNone);
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    const std::string_view name = text_.substr(start, pos_ - start);
    if (name == "True" || name == "False") {
      v.kind = Kind::kBool;
      v.flag = name == "True";
    } else if (name != "None") {
      fail("unexpected name '{}' at byte offset {} (the only names read are True, False and None)",
           py_escape(name), v.offset);
    }
    return v;
  }

  std::string_view text_;
  uint64_t base_;
  size_t pos_ = 0;
  size_t values_ = 0;
};

}  // namespace

PyLiteral parse_py_literal(std::string_view text, uint64_t base) {
  return Parser(text, base).parse();
}

std::string py_repr(const PyLiteral& v, size_t max_chars) {
  std::string out;
  append_repr(v, out, max_chars);
  if (out.size() > max_chars) out = out.substr(0, max_chars) + "...";
  return out;
}

std::string py_escape(std::string_view bytes, size_t max_chars) {
  std::string out;
  for (char c : bytes.substr(0, max_chars)) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\' || c == '\'')
      out += {'\\', c};
    else if (u >= 0x20 && u < 0x7f)
      out += c;
    else
      out += fmt::format("\\x{:02x}", u);
  }
  if (bytes.size() > max_chars) out += "...";
  return out;
}

}  // namespace kiln::io
