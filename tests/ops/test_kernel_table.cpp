// The per-device kernel table (Note [kernel table]): kernels registered by a backend, found by
// (op name, device), with clear errors where there is none.
#include "kiln/ops/kernel_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/ops/assign.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/embedding.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/interpolate.h"
#include "kiln/ops/join.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/pad.h"
#include "kiln/ops/pool.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/softmax.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

// An op defined without any kernel: a kernel registered elsewhere (here, below) computes it.
class TwiceOp final : public Op {
 public:
  const char* name() const override { return "test_kernel_table_twice"; }
  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc&) const override {
    return {{in[0].shape(), in[0].dtype(), in[0].device()}};
  }
};

void twice_kernel(const Op&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const std::vector<double> v = in[0].to_vector<double>();
  double* o = out[0].data<double>();
  for (size_t i = 0; i < v.size(); ++i) o[i] = 2 * v[i];
}
KILN_REGISTER_KERNEL("test_kernel_table_twice", DeviceType::CPU, twice_kernel);

class NoKernelOp final : public Op {
 public:
  const char* name() const override { return "test_kernel_table_none"; }
  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc&) const override {
    return {{in[0].shape(), in[0].dtype(), in[0].device()}};
  }
};

TEST(KernelTable, AKernelRegisteredApartFromTheOpComputesIt) {
  Tensor x = tensor({1.0, 2.5, -3.0}, {DType::Float64});
  Tensor y = dispatch1(std::make_shared<const TwiceOp>(), {x}, Loc::current());
  test::expect_values(y, {2.0, 5.0, -6.0});
  // Meta needs no kernel: the dispatcher makes outputs from infer's metadata.
  Tensor m = dispatch1(std::make_shared<const TwiceOp>(), {x.to(kMeta)}, Loc::current());
  EXPECT_TRUE(m.is_meta());
}

TEST(KernelTable, TheNormFamilyRunsOnTheCpuBackend) {
  const std::vector<std::string> cpu = ops_with_kernels(DeviceType::CPU);
  for (const char* op :
       {"batch_norm", "layer_norm", "group_norm", "channel_affine", "batch_norm_backward"})
    EXPECT_TRUE(std::find(cpu.begin(), cpu.end(), op) != cpu.end()) << op;
  EXPECT_TRUE(ops_with_kernels(DeviceType::Meta).empty());
  Tensor x = tensor({1.0, 3.0, 2.0, 6.0}, {DType::Float64}).reshape({2, 2});
  test::expect_values(layer_norm(x, {2}, Tensor(), Tensor(), 0.0), {-1, 1, -1, 1}, 1e-12);
}

TEST(KernelTable, ThePoolReduceAndSoftmaxFamiliesRunOnTheCpuBackend) {
  const std::vector<std::string> cpu = ops_with_kernels(DeviceType::CPU);
  for (const char* op :
       {"max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "adaptive_avg_pool2d",
        "max_pool2d_backward", "avg_pool2d_backward", "adaptive_avg_pool2d_backward", "sum", "prod",
        "max", "min", "argmax", "argmin", "softmax", "log_softmax"})
    EXPECT_TRUE(std::find(cpu.begin(), cpu.end(), op) != cpu.end()) << op;
  Tensor x = tensor({1.0, 3.0, 2.0, 6.0}, {DType::Float64}).reshape({2, 2});
  test::expect_values(sum(x, {1}), {4, 8});
  test::expect_values(argmax(x, 1), {1, 1});
  test::expect_values(softmax(x, 1),
                      {1 / (1 + std::exp(2.0)), 1 / (1 + std::exp(-2.0)), 1 / (1 + std::exp(4.0)),
                       1 / (1 + std::exp(-4.0))},
                      1e-12);
  test::expect_values(max_pool2d(x.reshape({1, 2, 2}), 2), {6});
}

TEST(KernelTable, TheIndexingJoinCopyAssignPadAndInterpolateFamiliesRunOnTheCpuBackend) {
  const std::vector<std::string> cpu = ops_with_kernels(DeviceType::CPU);
  for (const char* op :
       {"gather", "scatter_add", "index_select", "masked_fill", "one_hot", "embedding",
        "embedding_backward", "cat", "clone", "to_dtype", "copy_", "fill_", "slice_backward",
        "interpolate", "interpolate_backward", "pad", "pad_backward"})
    EXPECT_TRUE(std::find(cpu.begin(), cpu.end(), op) != cpu.end()) << op;
  // Views need no kernel.
  for (const char* op : {"reshape", "permute", "slice", "expand"})
    EXPECT_TRUE(std::find(cpu.begin(), cpu.end(), op) == cpu.end()) << op;
  Tensor x = tensor({1.0, 3.0, 2.0, 6.0}, {DType::Float64}).reshape({2, 2});
  Tensor index = tensor({1.0, 0.0}, {DType::Int64});
  test::expect_values(index_select(x, 0, index), {2, 6, 1, 3});
  test::expect_values(gather(x, 1, index.reshape({2, 1})), {3, 2});
  test::expect_values(embedding(x, index), {2, 6, 1, 3});
  test::expect_values(cat({x, x}, 1), {1, 3, 1, 3, 2, 6, 2, 6});
  test::expect_values(pad(x, {1, 0}, "replicate"), {1, 1, 3, 2, 2, 6});
  test::expect_values(slice_backward(x, {3, 2}, 0, 1, 3), {0, 0, 1, 3, 2, 6});
  InterpolateOptions resize;
  resize.size = std::pair<int64_t, int64_t>{2, 4};
  test::expect_values(interpolate(x.reshape({1, 1, 2, 2}), resize), {1, 1, 3, 3, 2, 2, 6, 6});
  Tensor y = zeros({2, 2}, {DType::Float64});
  assign(y, x.transpose(0, 1));
  test::expect_values(y, {1, 2, 3, 6});
  assign_fill(y, 0.5);
  test::expect_values(y, {0.5, 0.5, 0.5, 0.5});
}

TEST(KernelTable, AnOpWithoutAKernelIsAnInternalErrorNamingIt) {
  Tensor x = tensor({1.0}, {DType::Float64});
  try {
    dispatch1(std::make_shared<const NoKernelOp>(), {x}, Loc::current());
    ADD_FAILURE() << "expected InternalError";
  } catch (const InternalError& e) {
    test::expect_contains(e.what(), {"test_kernel_table_none", "no kernel for device cpu"});
  }
}

TEST(KernelTable, TwoKernelsForOneOpAndDeviceAreRefused) {
  EXPECT_THROW(register_kernel("test_kernel_table_twice", DeviceType::CPU, twice_kernel),
               InternalError);
}

}  // namespace
}  // namespace kiln
