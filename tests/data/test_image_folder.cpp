#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/data/image_folder.h"
#include "kiln/data/loader.h"
#include "tests/data/image_test_util.h"

namespace kiln::data {
namespace {

using testing::make_png;
using testing::TempDir;
using testing::write_bytes;

// A w x h RGB PNG filled with (r, g, b).
std::vector<uint8_t> solid(uint32_t w, uint32_t h, int r, int g, int b) {
  std::vector<int> samples;
  for (uint32_t i = 0; i < w * h; ++i) samples.insert(samples.end(), {r, g, b});
  return make_png(w, h, 2, 8, samples);
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

class ImageFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_bytes((dir_ / "root/dog/d1.png"), solid(4, 3, 1, 2, 3));
    write_bytes((dir_ / "root/cat/b.png"), solid(4, 3, 10, 20, 30));
    write_bytes((dir_ / "root/cat/A.PNG"), solid(4, 3, 11, 21, 31));
    write_bytes((dir_ / "root/cat/sub/c.png"), solid(4, 3, 12, 22, 32));
    write_bytes((dir_ / "root/cat/sub-x/d.png"), solid(4, 3, 13, 23, 33));
    write_bytes((dir_ / "root/cat/notes.txt"), {'h', 'i'});
    // A grayscale image in a color dataset: RGB mode repeats the channel.
    write_bytes((dir_ / "root/bird/g.png"), make_png(4, 3, 0, 8, std::vector<int>(12, 77)));
  }
  std::string root() const { return (dir_ / "root"); }
  std::string file(const std::string& rel) const { return (dir_ / "root/" + rel); }

  TempDir dir_{"image_folder"};
};

TEST_F(ImageFolderTest, ClassesAreSortedSubdirectoriesInTorchvisionOrder) {
  auto ds = image_folder(root());
  EXPECT_EQ(ds->class_names(), (std::vector<std::string>{"bird", "cat", "dog"}));
  EXPECT_EQ(ds->class_index("dog"), 2);
  ASSERT_EQ(ds->size(), 6);
  // torchvision sorts by (directory, file name): "cat/sub" before "cat/sub-x", although the full
  // path "cat/sub-x/d.png" sorts before "cat/sub/c.png".
  std::vector<std::string> want = {file("bird/g.png"),      file("cat/A.PNG"),
                                   file("cat/b.png"),       file("cat/sub/c.png"),
                                   file("cat/sub-x/d.png"), file("dog/d1.png")};
  for (int64_t i = 0; i < ds->size(); ++i) EXPECT_EQ(ds->path(i), want[i]) << i;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < ds->size(); ++i) labels.push_back(ds->label(i));
  EXPECT_EQ(labels, (std::vector<int64_t>{0, 1, 1, 1, 1, 2}));
}

TEST_F(ImageFolderTest, SamplesAreFloatChwAndLabels) {
  auto ds = image_folder(root());
  Example e = ds->get(2);
  EXPECT_EQ(e.data.shape(), (Shape{3, 3, 4}));
  EXPECT_EQ(e.data.dtype(), DType::Float32);
  EXPECT_FLOAT_EQ(e.data.select(0, 1).select(0, 2).select(0, 3).item<float>(), 20.0f / 255.0f);
  EXPECT_EQ(e.target.dtype(), DType::Int64);
  EXPECT_EQ(e.target.item<int64_t>(), 1);
  ImageFolderOptions raw;
  raw.dtype = DType::UInt8;
  Example g = image_folder(root(), raw)->get(0);
  EXPECT_EQ(g.data.dtype(), DType::UInt8);
  EXPECT_EQ(g.data.to_vector<int64_t>(), std::vector<int64_t>(36, 77));
  ImageFolderOptions gray;
  gray.mode = ImageMode::Gray;
  EXPECT_EQ(image_folder(root(), gray)->get(5).data.shape(), (Shape{1, 3, 4}));
}

TEST_F(ImageFolderTest, ParallelLoaderDecodesTheSameBatches) {
  auto ds = image_folder(root());
  auto run = [&](int workers) {
    DataLoaderOptions o;
    o.batch_size = 4;
    o.shuffle = true;
    o.seed = 3;
    o.num_workers = workers;
    std::vector<std::vector<float>> out;
    for (const Example& b : DataLoader(ds, o)) {
      out.push_back(b.data.to_vector<float>());
      auto t = b.target.to_vector<float>();
      out.push_back(t);
    }
    return out;
  };
  auto serial = run(0);
  EXPECT_EQ(serial.size(), 4u);
  EXPECT_EQ(run(2), serial);
}

TEST_F(ImageFolderTest, MixedSizesAreAnErrorUnlessResizedOrAllowed) {
  write_bytes(file("dog/big.png"), solid(6, 5, 100, 150, 200));
  auto ds = image_folder(root());
  int64_t big = 5;
  ASSERT_EQ(ds->path(big), file("dog/big.png"));
  std::string msg = message_of([&] { ds->get(big); });
  EXPECT_NE(msg.find("[ImageFolder] expected every image to have the shape of sample 0"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("g.png', 3x3x4), but '" + file("dog/big.png") + "' is 3x5x6"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("test_image_folder.cpp"), std::string::npos) << msg;

  ImageFolderOptions mixed;
  mixed.allow_mixed_sizes = true;
  EXPECT_EQ(image_folder(root(), mixed)->get(big).data.shape(), (Shape{3, 5, 6}));

  ImageFolderOptions resized;
  resized.size = std::pair<int64_t, int64_t>{8, 2};
  resized.dtype = DType::UInt8;
  auto rs = image_folder(root(), resized);
  Example e = rs->get(big);
  EXPECT_EQ(e.data.shape(), (Shape{3, 8, 2}));
  auto v = e.data.to_vector<int64_t>();
  EXPECT_EQ(v[0], 100);  // a solid image stays solid
  EXPECT_EQ(v[16], 150);
  EXPECT_EQ(v[47], 200);
}

TEST_F(ImageFolderTest, JpegSamplesMatchPil) {
  if (!testing::have_pil()) GTEST_SKIP() << "/usr/bin/python3 with PIL is not available";
  ASSERT_TRUE(testing::run_python(dir_, R"(
import sys
from PIL import Image
d = sys.argv[1]
img = Image.new("RGB", (4, 3))
img.putdata([(x * 60, y * 100, 255 - x * 40) for y in range(3) for x in range(4)])
img.save(d + "/root/dog/j.jpg", quality=95)
img.convert("L").save(d + "/root/dog/k.JPEG", quality=95)
open(d + "/j.raw", "wb").write(Image.open(d + "/root/dog/j.jpg").convert("RGB").tobytes())
open(d + "/k.raw", "wb").write(Image.open(d + "/root/dog/k.JPEG").convert("RGB").tobytes())
)"));
  ImageFolderOptions raw;
  raw.dtype = DType::UInt8;
  auto ds = image_folder(root(), raw);
  ASSERT_EQ(ds->size(), 8);
  for (auto [index, ref] : {std::pair<int64_t, const char*>{6, "j.raw"}, {7, "k.raw"}}) {
    ASSERT_EQ(ds->label(index), 2);
    auto got = ds->get(index).data.to_vector<int64_t>();
    auto want = testing::read_bytes((dir_ / ref));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      size_t c = i / 12, p = i % 12;  // [C, H, W] vs [H, W, C]
      EXPECT_NEAR(got[i], want[p * 3 + c], 1) << ref << " " << i;
    }
  }
}

TEST_F(ImageFolderTest, Errors) {
  std::string msg = message_of([&] { image_folder((dir_ / "nope")); });
  EXPECT_NE(msg.find("[ImageFolder] expected '" + (dir_ / "nope") +
                     "' to be a directory of class folders, but it is missing"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("test_image_folder.cpp"), std::string::npos) << msg;
  std::filesystem::create_directories(file("empty_class"));
  msg = message_of([&] { image_folder(root()); });
  EXPECT_NE(msg.find("but found none in [empty_class]"), std::string::npos) << msg;
  std::filesystem::remove(file("empty_class"));
  EXPECT_NE(
      message_of([&] { image_folder(file("cat/sub")); }).find("expected class subdirectories"),
      std::string::npos);

  // A corrupt image fails when decoded, naming the file; through a DataLoader too.
  auto png = solid(4, 3, 1, 1, 1);
  png.resize(png.size() - 15);
  write_bytes(file("dog/d1.png"), png);
  auto ds = image_folder(root());
  msg = message_of([&] { ds->get(5); });
  EXPECT_NE(msg.find("corrupt or truncated PNG file '" + file("dog/d1.png") + "'"),
            std::string::npos)
      << msg;
  msg = message_of([&] {
    for (const Example& b : DataLoader(ds, DataLoaderOptions{.batch_size = 2, .num_workers = 2}))
      (void)b;
  });
  EXPECT_NE(msg.find("[DataLoader] sample 5 failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("d1.png"), std::string::npos) << msg;
  EXPECT_NE(message_of([&] { ds->get(6); }).find("expected an index in [0, 6)"), std::string::npos);
}

}  // namespace
}  // namespace kiln::data
