// CRC-32 is the zlib/gzip/PNG one (Note [CRC-32] in kiln/io/crc32.h): its published check
// values, zlib's own answers, and a running checksum that equals the one of the whole.
#include "kiln/io/crc32.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <random>
#include <string>
#include <vector>

namespace kiln::io {
namespace {

TEST(Crc32, CheckValues) {
  EXPECT_EQ(crc32(""), 0u);
  EXPECT_EQ(crc32("123456789"), 0xCBF43926u);  // the catalogue's check value of CRC-32/ISO-HDLC
  EXPECT_EQ(crc32("a"), 0xE8B7BE43u);
  EXPECT_EQ(crc32("The quick brown fox jumps over the lazy dog"), 0x414FA339u);
  const std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(crc32(zeros), 0x190A55ADu);
}

TEST(Crc32, AgreesWithZlib) {
  std::mt19937 gen(7);
  std::vector<uint8_t> bytes(1 << 20);
  for (auto& b : bytes) b = static_cast<uint8_t>(gen());
  const auto want =
      static_cast<uint32_t>(::crc32(0, bytes.data(), static_cast<uInt>(bytes.size())));
  EXPECT_EQ(crc32(bytes), want);
}

TEST(Crc32, RunningChecksumEqualsTheWhole) {
  const std::string text = "checkpoint.json holds the checksums of its tensor files";
  for (size_t split = 0; split <= text.size(); ++split) {
    const uint32_t head = crc32(std::string_view(text).substr(0, split));
    EXPECT_EQ(crc32_update(head, text.data() + split, text.size() - split), crc32(text)) << split;
  }
}

// zlib's crc32 answers 0 for a null buffer whatever the running value; an empty tensor or span
// may have a null data pointer, and must not reset the checksum.
TEST(Crc32, EmptyUpdateKeepsTheChecksum) {
  const uint32_t crc = crc32("abc");
  EXPECT_EQ(crc32_update(crc, nullptr, 0), crc);
  EXPECT_EQ(crc32(std::span<const uint8_t>()), 0u);
}

}  // namespace
}  // namespace kiln::io
