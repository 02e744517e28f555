#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::io {

// Note [npz]: NumPy's archive of named arrays (numpy.savez, numpy.savez_compressed, numpy.load).
// It is a zip archive holding one .npy file (Note [npy]) per array, the entry "NAME.npy" for the
// array NAME; numpy.savez stores the entries, numpy.savez_compressed deflates them, and either
// switches to ZIP64 for large arrays. The zip side is libzip's (Debian's libzip-dev): kiln does not
// parse zip structures itself. Each entry's bytes go through read_npy_bytes, so an entry is held to
// everything a .npy file is.
//
// Reading is strict: the archive is opened with libzip's consistency checks (the central
// directory must agree with the local headers), every entry's size and CRC-32 are checked as it
// is read, and an archive that is not zip, is truncated, holds an entry that is not "NAME.npy",
// holds a name twice, is encrypted or compressed with anything but store and deflate is a
// kiln::Error naming the archive, the entry and what is wrong ("[read_npz] 'in.npz': entry
// 'x.npy': ..."). An error inside an entry's .npy data names both ("[read_npy] 'in.npz:x.npy':
// ..."). Memory grows with the bytes an entry really yields, not with the size its header claims.
//
// Writing is deterministic: the entries keep the given order and carry a fixed modification time
// (1980-01-01 00:00, the zip epoch), so the same arrays always give the same bytes (bundle content
// hashes rely on it). The archive is built in memory and written atomically (Note [atomic write]).
// Names must be unique, non-empty and relative ('/' makes a folder inside the archive, as in NumPy;
// an absolute name, a ".." component or a NUL byte is refused).

// Arrays by name, in archive order.
using NamedArrays = std::vector<std::pair<std::string, Tensor>>;

enum class NpzCompression {
  kStored,    // numpy.savez
  kDeflated,  // numpy.savez_compressed
};

// Reads and validates the .npz archive at `path`.
NamedArrays read_npz(const std::string& path, const Loc& loc = Loc::current());

// The same over an archive already in memory; `name_for_errors` stands for the file name.
NamedArrays read_npz_bytes(std::span<const uint8_t> bytes, const std::string& name_for_errors,
                           const Loc& loc = Loc::current());

// Writes `arrays` as an archive numpy.load reads (each as write_npy would write it).
void write_npz(const std::string& path, const NamedArrays& arrays,
               NpzCompression compression = NpzCompression::kStored,
               const Loc& loc = Loc::current());

// The bytes write_npz would write.
std::vector<uint8_t> serialize_npz(const NamedArrays& arrays,
                                   NpzCompression compression = NpzCompression::kStored,
                                   const Loc& loc = Loc::current());

}  // namespace kiln::io
