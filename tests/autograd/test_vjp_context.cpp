// What a vjp is told: the forward call's line and whether the gradient is differentiated.
#include <gtest/gtest.h>

#include <string>

#include "kiln/backend/cpu/loops.h"
#include "kiln/kiln.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/kernel_table.h"
#include "tests/support/test_util.h"

namespace kiln {
namespace {

struct Seen {
  bool create_graph = false;
  std::string loc;
  int calls = 0;
};

// y = 2x; its vjp reports what it saw, and fails when asked to.
class ProbeOp final : public Op {
 public:
  ProbeOp(Seen* seen, bool fail) : seen_(seen), fail_(fail) {}
  const char* name() const override { return "probe"; }
  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc&) const override {
    return {{in[0].shape(), in[0].dtype(), in[0].device()}};
  }
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    ++seen_->calls;
    seen_->create_graph = ctx.create_graph;
    seen_->loc = format_location(ctx.loc);
    if (fail_)
      fail("probe_backward", Loc::current(), "refused the gradient {}", ctx.grads[0].describe());
    return {mul(ctx.grads[0], 2.0)};
  }

 private:
  Seen* seen_;
  bool fail_;
};

// Its kernel, through the kernel table as every op's (Note [kernel table]).
void probe_kernel(const Op&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  copy_into(out[0], mul(in[0], 2.0));
}
KILN_REGISTER_KERNEL("probe", DeviceType::CPU, probe_kernel);

Tensor probe(const Tensor& x, Seen* seen, bool fail, const Loc& loc = Loc::current()) {
  return dispatch1(std::make_shared<const ProbeOp>(seen, fail), {x}, loc);
}

TEST(VjpContext, CarriesTheForwardLineAndCreateGraph) {
  Seen seen;
  Tensor x = test::leaf({1.0, 2.0});
  const int line = __LINE__ + 1;
  Tensor y = probe(x, &seen, false);
  y.sum().backward(Tensor(), /*retain_graph=*/true);
  EXPECT_EQ(seen.calls, 1);
  EXPECT_FALSE(seen.create_graph);
  EXPECT_NE(seen.loc.find("test_vjp_context.cpp:" + std::to_string(line)), std::string::npos)
      << seen.loc;
  y.sum().backward(Tensor(), /*retain_graph=*/true, /*create_graph=*/true);
  EXPECT_TRUE(seen.create_graph);
}

TEST(VjpContext, AnErrorInsideAVjpNamesTheForwardCall) {
  Seen seen;
  Tensor x = test::leaf({1.0});
  const int line = __LINE__ + 1;
  Tensor y = probe(x, &seen, true);
  test::expect_error(
      [&] { y.sum().backward(); },
      {"[probe_backward] refused the gradient",
       "(in the backward of 'probe' called at test_vjp_context.cpp:" + std::to_string(line) + ")"});
}

}  // namespace
}  // namespace kiln
