#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/data/image.h"
#include "tests/data/image_test_util.h"

namespace kiln::data {
namespace {

using testing::make_png;
using testing::TempDir;

std::vector<int64_t> pixels(const Tensor& t) {
  return t.to_vector<int64_t>();
}

Tensor decode(const std::vector<uint8_t>& bytes, ImageMode mode = ImageMode::Unchanged) {
  return decode_image_bytes(bytes, "mem.png", mode);
}

std::string message_of(const std::vector<uint8_t>& bytes, const std::string& name = "x.png") {
  try {
    decode_image_bytes(bytes, name);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// 3 x 2 RGB with distinct values.
std::vector<uint8_t> rgb_png() {
  return make_png(
      3, 2, 2, 8,
      {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180});
}

TEST(ImageDecode, PngGrayAndRgbAreChw) {
  Tensor g = decode(make_png(3, 2, 0, 8, {1, 2, 3, 4, 5, 255}));
  EXPECT_EQ(g.shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(g.dtype(), DType::UInt8);
  EXPECT_EQ(pixels(g), (std::vector<int64_t>{1, 2, 3, 4, 5, 255}));
  Tensor c = decode(rgb_png());
  EXPECT_EQ(c.shape(), (Shape{3, 2, 3}));
  EXPECT_EQ(pixels(c), (std::vector<int64_t>{10, 40, 70, 100, 130, 160,     // R
                                             20, 50, 80, 110, 140, 170,     // G
                                             30, 60, 90, 120, 150, 180}));  // B
}

TEST(ImageDecode, PngAlphaIsDropped) {
  Tensor rgba = decode(make_png(2, 1, 6, 8, {1, 2, 3, 0, 4, 5, 6, 255}));
  EXPECT_EQ(rgba.shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(pixels(rgba), (std::vector<int64_t>{1, 4, 2, 5, 3, 6}));
  Tensor ga = decode(make_png(2, 1, 4, 8, {7, 0, 9, 128}));
  EXPECT_EQ(ga.shape(), (Shape{1, 1, 2}));
  EXPECT_EQ(pixels(ga), (std::vector<int64_t>{7, 9}));
}

TEST(ImageDecode, PngPaletteWithTransparencyAndLowBitDepths) {
  Tensor p =
      decode(make_png(4, 1, 3, 2, {0, 1, 2, 1}, {255, 0, 0, 0, 255, 0, 0, 0, 255}, {0, 128}));
  EXPECT_EQ(p.shape(), (Shape{3, 1, 4}));
  EXPECT_EQ(pixels(p), (std::vector<int64_t>{255, 0, 0, 0, 0, 255, 0, 255, 0, 0, 255, 0}));
  Tensor one = decode(make_png(5, 1, 0, 1, {0, 1, 1, 0, 1}));
  EXPECT_EQ(pixels(one), (std::vector<int64_t>{0, 255, 255, 0, 255}));
  Tensor four = decode(make_png(3, 1, 0, 4, {0, 7, 15}));
  EXPECT_EQ(pixels(four), (std::vector<int64_t>{0, 119, 255}));
}

TEST(ImageDecode, Png16BitIsScaledWithRounding) {
  // round(v * 255 / 65535): 0x01C0 -> 1.74 -> 2, 0x0180 -> 1.49 -> 1 (the high byte alone gives 1).
  Tensor t = decode(make_png(3, 1, 2, 16, {0x01C0, 0x0180, 0xFFFF, 0x8000, 0, 0x7F7F, 0, 0, 0}));
  EXPECT_EQ(t.shape(), (Shape{3, 1, 3}));
  EXPECT_EQ(pixels(t), (std::vector<int64_t>{2, 128, 0, 1, 0, 0, 255, 127, 0}));
}

TEST(ImageDecode, InterlacedPng) {
  testing::PngSpec spec;
  spec.width = 11;
  spec.height = 9;
  spec.color_type = 2;
  std::vector<int64_t> want(3 * 9 * 11);
  for (int y = 0; y < 9; ++y)
    for (int x = 0; x < 11; ++x)
      for (int c = 0; c < 3; ++c) {
        int v = (x * 13 + y * 7 + c * 50) % 256;
        spec.samples.push_back(v);
        want[(c * 9 + y) * 11 + x] = v;
      }
  EXPECT_EQ(pixels(decode(make_png(spec, true))), want);
  EXPECT_EQ(pixels(decode(make_png(spec, false))), want);
}

TEST(ImageDecode, ModesConvertChannels) {
  Tensor gray = decode(rgb_png(), ImageMode::Gray);
  EXPECT_EQ(gray.shape(), (Shape{1, 2, 3}));
  auto luma = [](int r, int g, int b) { return (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16; };
  EXPECT_EQ(pixels(gray)[0], luma(10, 20, 30));
  EXPECT_EQ(pixels(gray)[5], luma(160, 170, 180));
  Tensor rgb = decode(make_png(2, 1, 0, 8, {3, 200}), ImageMode::RGB);
  EXPECT_EQ(pixels(rgb), (std::vector<int64_t>{3, 200, 3, 200, 3, 200}));
  EXPECT_EQ(decode(rgb_png(), ImageMode::RGB).shape(), (Shape{3, 2, 3}));
}

TEST(ImageDecode, TruncatedPngNamesFileAndOffset) {
  auto png = rgb_png();
  for (size_t n = 0; n < png.size(); ++n) {
    std::vector<uint8_t> prefix(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(n));
    std::string msg = message_of(prefix, "cut.png");
    EXPECT_NE(msg.find("[decode_image]"), std::string::npos) << n << ": " << msg;
    EXPECT_NE(msg.find("cut.png"), std::string::npos) << n << ": " << msg;
    EXPECT_NE(msg.find("test_image.cpp"), std::string::npos) << n << ": " << msg;
    if (n > 8) {
      EXPECT_NE(msg.find(fmt::format("near byte offset {} of {}", n, n)), std::string::npos)
          << n << ": " << msg;
    }
  }
}

TEST(ImageDecode, CorruptPngIsAnErrorNeverACrash) {
  auto png = rgb_png();
  auto bad_crc = png;
  bad_crc[30] ^= 0x55;  // IHDR's CRC (8 signature + 4 length + 4 type + 13 data = 29..32)
  EXPECT_NE(message_of(bad_crc).find("IHDR: CRC error"), std::string::npos) << message_of(bad_crc);
  auto bad_data = png;
  bad_data[png.size() - 20] ^= 0x55;  // compressed pixels: zlib notices before the chunk's CRC
  EXPECT_NE(message_of(bad_data).find("near byte offset"), std::string::npos);
  for (size_t i = 8; i < png.size(); ++i) {
    auto flipped = png;
    flipped[i] ^= 0xFF;
    try {
      decode(flipped);
    } catch (const Error&) {
    }
  }
}

TEST(ImageDecode, NotAnImage) {
  std::string msg = message_of({'G', 'I', 'F', '8', '9', 'a', 1, 2}, "anim.gif");
  EXPECT_NE(msg.find("'anim.gif' is neither a PNG nor a JPEG file: it starts with bytes 47 49 46"),
            std::string::npos)
      << msg;
  EXPECT_NE(message_of({}, "e.png").find("'e.png' is empty"), std::string::npos);
  try {
    decode_image("/nonexistent/dir/img.png");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open '/nonexistent/dir/img.png'"),
              std::string::npos)
        << e.what();
  }
}

// Images from PIL, and PIL's own decoding of them (both use Debian's libjpeg-turbo).
class PilImages : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::have_pil()) GTEST_SKIP() << "/usr/bin/python3 with PIL is not available";
    ASSERT_TRUE(testing::run_python(dir_, R"(
import sys
from PIL import Image
d = sys.argv[1]
w, h = 37, 23
img = Image.new("RGB", (w, h))
img.putdata([((x * 7 + y * 3) % 256, (x * x + y) % 256, (255 - x * 5 + y * 11) % 256)
             for y in range(h) for x in range(w)])
img.save(d + "/rgb.jpg", quality=90)
img.save(d + "/prog.jpg", quality=75, progressive=True, subsampling=2)
img.convert("L").save(d + "/gray.jpg", quality=85)
img.save(d + "/rgb.png")
img.convert("P", palette=Image.ADAPTIVE, colors=16).save(d + "/pal.png")
for name, mode in [("rgb.jpg", None), ("prog.jpg", None), ("gray.jpg", None),
                   ("rgb.jpg", "L"), ("rgb.png", "L"), ("pal.png", "RGB")]:
    im = Image.open(d + "/" + name)
    if mode:
        im = im.convert(mode)
    open(d + "/" + name + "." + (mode or "raw"), "wb").write(im.tobytes())
)"));
  }

  // PIL's interleaved [H, W, C] bytes as a [C, H, W] list.
  std::vector<int64_t> reference(const std::string& name, int64_t c, int64_t h, int64_t w) {
    auto raw = testing::read_bytes((dir_ / name));
    EXPECT_EQ(static_cast<int64_t>(raw.size()), c * h * w) << name;
    std::vector<int64_t> out(raw.size());
    for (int64_t k = 0; k < c; ++k)
      for (int64_t i = 0; i < h * w; ++i) out[k * h * w + i] = raw[i * c + k];
    return out;
  }

  void expect_close(const std::vector<int64_t>& got, const std::vector<int64_t>& want,
                    int64_t tolerance, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int64_t worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
    EXPECT_LE(worst, tolerance) << what;
  }

  TempDir dir_{"image"};
};

// Same libjpeg-turbo, same default settings (islow IDCT, fancy upsampling): the pixels agree
// exactly.
TEST_F(PilImages, JpegMatchesPil) {
  for (const char* name : {"rgb.jpg", "prog.jpg"}) {
    Tensor t = decode_image((dir_ / name));
    ASSERT_EQ(t.shape(), (Shape{3, 23, 37})) << name;
    expect_close(pixels(t), reference(std::string(name) + ".raw", 3, 23, 37), 0, name);
  }
  Tensor g = decode_image((dir_ / "gray.jpg"));
  ASSERT_EQ(g.shape(), (Shape{1, 23, 37}));
  expect_close(pixels(g), reference("gray.jpg.raw", 1, 23, 37), 0, "gray.jpg");
  expect_close(pixels(decode_image((dir_ / "rgb.jpg"), ImageMode::Gray)),
               reference("rgb.jpg.L", 1, 23, 37), 0, "rgb.jpg as L");
}

TEST_F(PilImages, PngMatchesPilExactly) {
  expect_close(pixels(decode_image((dir_ / "rgb.png"), ImageMode::Gray)),
               reference("rgb.png.L", 1, 23, 37), 0, "rgb.png as L");
  Tensor pal = decode_image((dir_ / "pal.png"));
  ASSERT_EQ(pal.shape(), (Shape{3, 23, 37}));
  expect_close(pixels(pal), reference("pal.png.RGB", 3, 23, 37), 0, "pal.png");
}

TEST_F(PilImages, TruncatedJpegIsAnError) {
  auto jpeg = testing::read_bytes((dir_ / "prog.jpg"));
  for (size_t n = 0; n < jpeg.size(); ++n) {
    std::vector<uint8_t> prefix(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(n));
    std::string msg = message_of(prefix, "cut.jpg");
    EXPECT_NE(msg.find("cut.jpg"), std::string::npos) << n << ": " << msg;
    if (n > 3) {
      EXPECT_NE(msg.find("corrupt or truncated JPEG"), std::string::npos) << n << ": " << msg;
    }
  }
  // libjpeg-turbo's Huffman decoder reads ahead in a local buffer, so the offset is "near".
  std::string msg = message_of({jpeg.begin(), jpeg.begin() + 400}, "cut.jpg");
  size_t at = msg.find("near byte offset ");
  ASSERT_NE(at, std::string::npos) << msg;
  int64_t offset = std::stoll(msg.substr(at + 17));
  EXPECT_GE(offset, 380) << msg;
  EXPECT_LE(offset, 400) << msg;
  EXPECT_NE(msg.find(" of 400): Premature end of JPEG file"), std::string::npos) << msg;
}

TEST_F(PilImages, CorruptJpegIsAnErrorNeverACrash) {
  auto jpeg = testing::read_bytes((dir_ / "rgb.jpg"));
  int errors = 0;
  for (size_t i = 3; i < jpeg.size(); ++i) {
    auto flipped = jpeg;
    flipped[i] ^= 0xA5;
    try {
      decode_image_bytes(flipped, "flipped.jpg");
    } catch (const Error& e) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace kiln::data
