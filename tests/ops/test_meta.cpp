// Note [faithful meta]: meta tensors carry the geometry eager tensors have, so a shape-only run
// (a trace) accepts and refuses exactly what eager does.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

TEST(FaithfulMeta, ToMetaKeepsStridesAndOffset) {
  Tensor x = test::iota({3, 4}, 0, DType::Float32);
  Tensor v = slice(x.t(), 0, 1, 3);
  Tensor m = v.to(kMeta);
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.shape(), v.shape());
  EXPECT_EQ(m.strides(), v.strides());
  EXPECT_EQ(m.storage_offset(), v.storage_offset());
  EXPECT_FALSE(m.is_contiguous());
}

TEST(FaithfulMeta, ViewOfATransposeFailsOnMetaAsInEager) {
  Tensor x = test::iota({3, 4});
  const std::string eager = test::error_of([&] { view(x.t(), {12}); });
  const std::string meta = test::error_of([&] { view(x.to(kMeta).t(), {12}); });
  EXPECT_FALSE(eager.empty());
  // The same message, apart from the device in the operand's description.
  EXPECT_EQ(meta.substr(0, meta.find(" on ")), eager.substr(0, eager.find(" on ")));
  // reshape copies where view cannot: on meta as in eager.
  Tensor r = reshape(x.to(kMeta).t(), {12});
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(r.shape(), (Shape{12}));
}

TEST(FaithfulMeta, ViewsOnMetaShareTheirBase) {
  Tensor base = empty({2, 3, 4}, {DType::Float32, kMeta});
  Tensor p = permute(base, {2, 0, 1});
  EXPECT_EQ(p.storage(), base.storage());
  EXPECT_EQ(p.strides(), (Strides{1, 12, 4}));
  Tensor s = select(base, 1, 2);
  EXPECT_EQ(s.storage_offset(), 8);
  EXPECT_EQ(s.storage(), base.storage());
  Tensor e = expand(unsqueeze(base, 0), {5, 2, 3, 4});
  EXPECT_EQ(e.strides()[0], 0);
}

TEST(FaithfulMeta, ElementwiseOpsKeepChannelsLastOnMeta) {
  Tensor x = contiguous(test::iota({2, 3, 4, 5}), MemoryFormat::kChannelsLast);
  Tensor eager = relu(x);
  Tensor meta = relu(x.to(kMeta));
  EXPECT_EQ(meta.strides(), eager.strides());
  EXPECT_TRUE(meta.is_channels_last());
}

TEST(FaithfulMeta, ConvolutionChoosesItsOutputLayoutInInference) {
  // One image without gradients is the pass whose kernels may write NHWC (Note [channels-last]);
  // whatever the primitive on this CPU wants, meta reports the layout eager allocates.
  NoGradGuard no_grad;
  for (bool channels_last : {false, true}) {
    Tensor x = test::iota({1, 8, 9, 9}, 0, DType::Float32);
    if (channels_last) x = contiguous(x, MemoryFormat::kChannelsLast);
    Tensor w = test::iota({16, 8, 3, 3}, 0, DType::Float32);
    Tensor eager = conv2d(x, w, Tensor(), {.padding = 1});
    Tensor meta = conv2d(x.to(kMeta), w.to(kMeta), Tensor(), {.padding = 1});
    EXPECT_EQ(meta.strides(), eager.strides()) << "channels_last input " << channels_last;
  }
}

}  // namespace
}  // namespace kiln
