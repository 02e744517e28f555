#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::io {

// Note [npy]: NumPy's single-array format (numpy.save / numpy.load). Layout:
//   6 bytes   the magic string "\x93NUMPY"
//   2 bytes   major, minor version: 1.0, 2.0 or 3.0
//   2 or 4    little-endian header length N: a u16 in version 1.0, a u32 in 2.0 and 3.0
//   N bytes   a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//             padded with spaces and ended by '\n' (latin-1 in 1.0 and 2.0, UTF-8 in 3.0)
//   rest      the elements, C order (row-major) or, when fortran_order is True, column-major
// NumPy reads the header with ast.literal_eval; kiln parses it with a small hand-written parser
// of literals (Note [python literals] in python_literal.h), so loading never executes code, and
// object arrays (pickles) are refused outright.
//
// Reading is strict, like load_safetensors: the header, the dtype, the shape and the data length
// are all checked against the file's size before a byte of tensor memory is allocated, so a
// corrupt or hostile file is a kiln::Error ("[read_npy] 'file': ...") naming the byte offset at
// fault and what was expected, never a crash or a huge allocation. The data must fill the rest of
// the file exactly: a short file is truncated, and trailing bytes are an error too (numpy.load
// would ignore them, but they mean the file is not what its header says).
//
// Dtypes ('descr'): '<f2' float16, '<f4' float32, '<f8' float64, '|u1' uint8, '|i1' int8,
// '<i4' int32, '<i8' int64, '|b1' bool (whose bytes must be 0 or 1), and the big-endian forms
// ('>f4', ...), which are byte-swapped. NumPy dtypes kiln has no equal for (int16, uint16,
// uint32, uint64, complex, strings, datetimes, structured and object arrays) are errors that say
// so, rather than a silent conversion; cast them with astype() in NumPy first.
//
// The result is always a fresh, contiguous cpu tensor in C order: a Fortran-order array is
// transposed on load so that it holds the same logical values, and a 0-d array (shape ()) gives
// a 0-dim tensor.

// Reads and validates the .npy file at `path`.
Tensor read_npy(const std::string& path, const Loc& loc = Loc::current());

// The same validation and decoding over bytes already in memory; `name_for_errors` stands for the
// file name in messages.
Tensor read_npy_bytes(std::span<const uint8_t> bytes, const std::string& name_for_errors,
                      const Loc& loc = Loc::current());

// Writes `t` as a version 1.0 file (2.0 if the header outgrows a u16 length), C order, little
// endian, with the header padded so that the data starts at a multiple of 64 bytes, as NumPy
// does. The write is atomic (Note [atomic write]). bfloat16 tensors are an error, since NumPy has
// no bfloat16: convert them explicitly (to float32) first. Undefined and meta tensors are errors.
void write_npy(const std::string& path, const Tensor& t, const Loc& loc = Loc::current());

// The bytes write_npy would write (for in-memory use and tests).
std::vector<uint8_t> serialize_npy(const Tensor& t, const Loc& loc = Loc::current());

// The 'descr' that write_npy writes for dt ("<f4", "|u1", ...); an error for bfloat16.
std::string npy_descr(DType dt, const Loc& loc = Loc::current());

}  // namespace kiln::io
