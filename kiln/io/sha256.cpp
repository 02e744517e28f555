#include "kiln/io/sha256.h"

#include <openssl/evp.h>

#include <new>
#include <stdexcept>
#include <string>

namespace kiln::io {

namespace {
EVP_MD_CTX* as_ctx(void* p) {
  return static_cast<EVP_MD_CTX*>(p);
}
// libcrypto fails only on allocation failure or misuse; neither is a user error.
void check(int ok, const char* what) {
  if (ok != 1) throw std::runtime_error(std::string("SHA-256: libcrypto's ") + what + " failed");
}
}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr) throw std::bad_alloc();
  check(EVP_DigestInit_ex(as_ctx(ctx_), EVP_sha256(), nullptr), "EVP_DigestInit_ex");
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(as_ctx(ctx_));
}

Sha256& Sha256::update(const void* data, size_t n) {
  if (n > 0) check(EVP_DigestUpdate(as_ctx(ctx_), data, n), "EVP_DigestUpdate");
  return *this;
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  check(EVP_DigestFinal_ex(as_ctx(ctx_), digest, &len), "EVP_DigestFinal_ex");
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kDigits[digest[i] >> 4];
    out[2 * i + 1] = kDigits[digest[i] & 15];
  }
  return out;
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace kiln::io
