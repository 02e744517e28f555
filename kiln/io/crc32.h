#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace kiln::io {

// Note [CRC-32]
// ~~~~~~~~~~~~~
// The checksums kiln writes into its files (checkpoint manifests, pipeline caches) are the
// CRC-32 of zlib, gzip, PNG and Python's zlib.crc32 (ISO-HDLC: reflected polynomial 0xEDB88320,
// initial value and final xor 0xFFFFFFFF), so any tool can recompute them:
// crc32("123456789") == 0xCBF43926. It catches truncation, bit flips and files swapped in from
// elsewhere; it is no defence against deliberate tampering, which is not what it is for. Every
// writer and reader of a kiln format computes it here, so that none carries its own copy.

// Extends the checksum `crc` of some bytes by `n` more: crc32_update(crc32(a), b) == crc32(a + b).
// The checksum of no bytes is 0, so a running checksum starts at 0.
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);

inline uint32_t crc32(std::span<const uint8_t> bytes) {
  return crc32_update(0, bytes.data(), bytes.size());
}
inline uint32_t crc32(std::string_view text) {
  return crc32_update(0, text.data(), text.size());
}

}  // namespace kiln::io
