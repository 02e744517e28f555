#include "kiln/io/crc32.h"

#include <zlib.h>

namespace kiln::io {

uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  // zlib answers 0 for a null buffer whatever `crc` is (its way of asking for the initial
  // value), and an empty span or tensor may well have a null data pointer.
  if (n == 0) return crc;
  // crc32_z takes a size_t length, so a tensor file over 4 GiB needs no chunking here.
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), n));
}

}  // namespace kiln::io
