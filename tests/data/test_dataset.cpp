#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "kiln/data/dataset.h"
#include "kiln/data/loader.h"
#include "kiln/ops/factories.h"

namespace kiln::data {
namespace {

TEST(DataDataset, TensorDatasetSlicesDim0) {
  Tensor x = arange(12, TensorOptions{DType::Float32}).reshape(Shape{3, 4});
  Tensor y = tensor<int64_t>({7, 8, 9});
  TensorDataset ds(x, y);
  EXPECT_EQ(ds.size(), 3);
  Example e = ds.get(1);
  EXPECT_EQ(e.data.to_vector<float>(), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(e.target.item<int64_t>(), 8);
  EXPECT_THROW(ds.get(3), Error);
  EXPECT_FALSE(TensorDataset(x).get(0).target.defined());
}

TEST(DataDataset, TensorDatasetRejectsMismatchedLengths) {
  try {
    TensorDataset(zeros(Shape{3, 2}), zeros(Shape{4}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[TensorDataset]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_dataset.cpp"), std::string::npos) << msg;
  }
}

TEST(DataDataset, TransformDatasetAppliesTransform) {
  auto base = std::make_shared<TensorDataset>(ones(Shape{2, 1, 2, 2}, TensorOptions{DType::UInt8}));
  TransformDataset ds(base, Compose({ToFloat{}, Normalize({0.0}, {2.0 / 255.0})}));
  EXPECT_EQ(ds.size(), 2);
  auto v = ds.get(0).data.to_vector<float>();
  for (float f : v) EXPECT_FLOAT_EQ(f, 0.5f);
}

TEST(DataDataset, FashionMnistLoadsRealData) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is not installed";
  auto test = fashion_mnist(dir, "test");
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(test->data().shape(), (Shape{10000, 1, 28, 28}));
  EXPECT_EQ(test->data().dtype(), DType::Float32);
  EXPECT_EQ(test->target().dtype(), DType::Int64);
  auto labels = test->target().to_vector<int64_t>();
  EXPECT_EQ(*std::min_element(labels.begin(), labels.end()), 0);
  EXPECT_EQ(*std::max_element(labels.begin(), labels.end()), 9);
  auto pixels = test->data().to_vector<float>();
  EXPECT_GE(*std::min_element(pixels.begin(), pixels.end()), 0.0f);
  EXPECT_LE(*std::max_element(pixels.begin(), pixels.end()), 1.0f);
  EXPECT_GT(*std::max_element(pixels.begin(), pixels.end()), 0.9f);

  auto train = fashion_mnist(dir, "train");
  EXPECT_EQ(train->size(), 60000);
  DataLoader loader(train, {.batch_size = 64, .shuffle = true, .num_workers = 2});
  auto it = loader.begin();
  EXPECT_EQ(it->data.shape(), (Shape{64, 1, 28, 28}));
  EXPECT_EQ(it->target.shape(), (Shape{64}));

  EXPECT_THROW(fashion_mnist(dir, "valid"), Error);
  EXPECT_THROW(fashion_mnist("/nonexistent", "train"), Error);
}

}  // namespace
}  // namespace kiln::data
