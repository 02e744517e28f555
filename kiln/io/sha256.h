#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::io {

// Note [content hash]
// ~~~~~~~~~~~~~~~~~~~
// Every file a verified manifest lists (Note [verified manifest] in kiln/io/manifest.h) is
// recorded with its SHA-256 (FIPS 180-4) beside its size and CRC-32, as 64 lowercase hex digits:
// the same string `sha256sum FILE` prints, so a bundle can be checked, compared and pinned with
// standard tools, and two bundles hold the same weights exactly when their hashes agree. The
// CRC-32 catches accidents; the hash also names the content (a server can report which weights
// it serves, a cache can key on them). It is an integrity check, not a signature: whoever can
// rewrite the files can rewrite the manifest too. OpenSSL's libcrypto computes it (the EVP
// interface, which uses the CPU's SHA extensions where it has them).

// A running SHA-256: update() with the bytes in any number of pieces, then hex() once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& update(const void* data, size_t n);
  // The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex();

 private:
  void* ctx_;  // EVP_MD_CTX*, kept out of this header
};

inline std::string sha256_hex(std::span<const uint8_t> bytes) {
  return Sha256().update(bytes.data(), bytes.size()).hex();
}
inline std::string sha256_hex(std::string_view text) {
  return Sha256().update(text.data(), text.size()).hex();
}

// Whether `s` has the form of a hex digest: 64 lowercase hex digits.
bool is_sha256_hex(std::string_view s);

}  // namespace kiln::io
