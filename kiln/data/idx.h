#pragma once
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::data {

// Reads an IDX file (the MNIST / Fashion-MNIST format), gzip-compressed or plain, into a tensor of
// the file's element type (uint8, int8, int32 as stored as big-endian 32-bit, float32, float64;
// 16-bit "short" is widened to int32). A malformed, truncated or oversized file is a kiln::Error
// naming the file and the byte offset where reading failed.
Tensor read_idx(const std::string& path, const Loc& loc = Loc::current());

}  // namespace kiln::data
