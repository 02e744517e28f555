// The convolution family and bmm run on kernels registered by kiln/backend/onednn/ (Note [kernel
// table]), and conv's definitions get their output layouts from the registered planner (Note
// [conv planner]), on meta as in eager.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/linalg.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

TEST(ConvKernelTable, TheConvolutionFamilyAndBmmHaveCpuKernels) {
  const std::vector<std::string> cpu = ops_with_kernels(DeviceType::CPU);
  for (const char* op : {"conv2d", "conv2d_affine", "conv2d_backward_input",
                         "conv2d_backward_weight", "conv_bn_fold", "bmm"})
    EXPECT_TRUE(std::find(cpu.begin(), cpu.end(), op) != cpu.end()) << op;
}

TEST(ConvKernelTable, MetaAndEagerAgreeOnTheLayoutThePlannerChooses) {
  // A single float32 image without gradients runs the inference primitive, which writes NHWC
  // (Note [conv inference kind]); infer asks the planner, so meta sees the same layout.
  NoGradGuard no_grad;
  Tensor x = randn({1, 16, 8, 8}), w = randn({16, 16, 3, 3});
  Tensor y = conv2d(x, w, Tensor(), {.padding = 1});
  Tensor m = conv2d(x.to(kMeta), w.to(kMeta), Tensor(), {.padding = 1});
  EXPECT_EQ(m.shape(), y.shape());
  EXPECT_EQ(m.strides(), y.strides());
  EXPECT_EQ(m.is_channels_last(), y.is_channels_last());
}

}  // namespace
}  // namespace kiln
