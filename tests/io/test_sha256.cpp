// SHA-256 is FIPS 180-4's (Note [content hash] in kiln/io/sha256.h): the standard's test vectors,
// any split of the input into pieces, and the digest `sha256sum` prints for a file.
#include "kiln/io/sha256.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/io/temp_files.h"

namespace kiln::io {
namespace {

TEST(Sha256, StandardTestVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a': the standard's long message, crossing many 64-byte blocks.
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_TRUE(is_sha256_hex(sha256_hex("abc")));
}

TEST(Sha256, PiecesGiveTheDigestOfTheWhole) {
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  const std::string whole = sha256_hex(bytes);
  for (size_t split : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{999}}) {
    Sha256 h;
    h.update(bytes.data(), split).update(nullptr, 0).update(bytes.data() + split, 1000 - split);
    EXPECT_EQ(h.hex(), whole) << split;
  }
}

TEST(Sha256, AgreesWithSha256sum) {
  testing::TempRoot tmp("sha256");
  const std::string path = tmp / "f.bin";
  std::string text;
  for (int i = 0; i < 5000; ++i) text += static_cast<char>(i % 251);
  testing::write_text(path, text);
  FILE* p = popen(("sha256sum '" + path + "'").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char out[65] = {};
  ASSERT_EQ(fread(out, 1, 64, p), 64u);
  pclose(p);
  EXPECT_EQ(sha256_hex(text), std::string(out));
}

TEST(Sha256, HexForm) {
  EXPECT_FALSE(is_sha256_hex(""));
  EXPECT_FALSE(is_sha256_hex(std::string(63, 'a')));
  EXPECT_FALSE(is_sha256_hex(std::string(64, 'A')));  // lowercase only, as sha256sum prints
  EXPECT_FALSE(is_sha256_hex(std::string(63, '0') + "g"));
  EXPECT_TRUE(is_sha256_hex(std::string(64, 'f')));
}

}  // namespace
}  // namespace kiln::io
