#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::io {

// Note [safetensors]: the checkpoint format shared with PyTorch / Hugging Face. Layout:
//   8 bytes   little-endian u64 N, the header length
//   N bytes   UTF-8 JSON object {name: {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
//             ..., "__metadata__": {str: str}} (optional metadata), padded with spaces
//   rest      the data buffer; tensor bytes are [b, e) relative to its start, row-major, little
//             endian
// Loading is data only (no code runs) and strict: every header field is checked against the file
// before a byte of tensor memory is allocated, so a corrupt or hostile file is a kiln::Error naming
// the file and the byte offset or tensor at fault, never a crash or a huge allocation.
//
// Supported dtypes: F64 F32 F16 BF16 I64 I32 I8 U8 BOOL (kiln's dtypes). BOOL bytes must be 0 or 1.

struct SafetensorsFile {
  // In the order of the header's keys (for files kiln writes, also the order of the data).
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;

  // The tensor called `name`; throws a kiln::Error listing the names when absent.
  const Tensor& at(const std::string& name, const Loc& loc = Loc::current()) const;
};

// Writes `tensors` atomically (see Note [atomic write] in atomic_file.h): header keys and data in
// the given order, each tensor made contiguous, header padded with spaces so the data starts at a
// multiple of 8. Throws on duplicate names, names starting with "__", undefined or meta tensors,
// strings that are not valid UTF-8, or any I/O failure (the previous file at `path` is then left
// as it was).
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      const Loc& loc = Loc::current());

// Reads and validates a whole file; tensors are fresh contiguous cpu tensors.
SafetensorsFile load_safetensors(const std::string& path, const Loc& loc = Loc::current());

// The same validation and decoding over bytes already in memory; `name_for_errors` stands for the
// file name in messages.
SafetensorsFile parse_safetensors(std::span<const uint8_t> bytes,
                                  const std::string& name_for_errors,
                                  const Loc& loc = Loc::current());

// The serialized bytes save_safetensors would write (for in-memory use and tests).
std::vector<uint8_t> serialize_safetensors(
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata = {}, const Loc& loc = Loc::current());

// "F32", "BF16", ... (the format's names for kiln dtypes).
const char* safetensors_dtype_name(DType dt);

}  // namespace kiln::io
