// running_stat_update: batch norm's update of a running statistic in training mode, one op that
// writes the buffer in place (Note [effects]). The kernel is in
// kiln/backend/cpu/running_stats_ops.cpp (Note [kernel table]).
//
// Note [running statistics]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Training-mode batch norm updates running_var with the unbiased batch variance, var * n/(n-1),
// n the number of values per channel. Computed in C++ from x's shape and passed to a `mul`, that
// factor would be a number in the op stream: a trace would bake the traced batch size into the
// graph (the symbolic check, Note [symbolic dims], rightly refuses it). So the update is one op
// whose kernel reads n from its input x: the graph holds only momentum, and runs for any batch.
// x is an input for its shape alone (the kernel never reads its memory). The arithmetic is the
// one PyTorch's eager update does, in the buffer's dtype, operation by operation:
//   running = running * (1 - momentum) + (batch * c) * momentum, c = n / (n - 1) or 1,
// each scalar rounded to the buffer's dtype first. An empty batch (n = 0) leaves the buffer as
// it was, as in PyTorch; n = 1 with unbiased is an error (the variance is undefined).
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/norm_ops.h"
#include "kiln/ops/op_factory.h"

namespace kiln {

namespace {

class RunningStatOp final : public Op {
 public:
  explicit RunningStatOp(detail::RunningStatAttrs a) : a_(a) {}
  const char* name() const override { return "running_stat_update"; }
  nlohmann::json attrs() const override {
    return {{"momentum", attr_double(a_.momentum)}, {"unbiased", a_.unbiased}};
  }
  const detail::RunningStatAttrs& stat_attrs() const { return a_; }
  bool differentiable() const override { return false; }
  Saves saves() const override { return {false, false}; }
  uint64_t mutates() const override { return 1; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &running = in[0], &batch = in[1], &x = in[2];
    if (x.dim() < 2)
      fail(name(), loc, "expected an input x of rank >= 2 (N, C, ...), but got {}", x.describe());
    const Shape c{x.dim_size(1)};
    if (running.shape() != c || !is_floating(running.dtype()))
      fail(name(), loc,
           "expected a floating-point running statistic of shape [{}] (x's channels), but got {} "
           "for x {}",
           x.dim_size(1), running.describe(), x.describe());
    if (batch.shape() != c || batch.dtype() != running.dtype())
      fail(name(), loc, "expected a batch statistic like the running one ({}), but got {}",
           running.describe(), batch.describe());
    if (a_.unbiased && x.numel() == x.dim_size(1) && x.numel() > 0)
      fail(name(), loc,
           "expected more than 1 value per channel when training, but got input {} (the "
           "unbiased variance of one value is undefined)",
           x.describe());
    TensorMeta m{running.shape(), running.dtype(), running.device()};
    m.strides = running.strides();
    m.storage_offset = running.storage_offset();
    m.alias_of = 0;
    return one_output(std::move(m));
  }

  // The output is the running statistic itself; the kernel writes it in place.
  std::vector<Tensor> forward(const std::vector<Tensor>& in,
                              const std::vector<TensorMeta>&) const override {
    kernel(in, {in[0]});
    in[0].storage()->bump_version(name(), kernel_call_site());
    return {in[0]};
  }

 private:
  detail::RunningStatAttrs a_;
};

KILN_REGISTER_OP("running_stat_update",
                 (OpSchema{{"running", "batch_stat", "x"}, {"running"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const RunningStatOp>(
                       detail::RunningStatAttrs{a.f("momentum"), a.b("unbiased")});
                 });

}  // namespace

const detail::RunningStatAttrs& detail::running_stat_attrs(const Op& op) {
  const auto* o = dynamic_cast<const RunningStatOp*>(&op);
  KILN_INTERNAL_ASSERT(o != nullptr, std::string("running_stat_attrs of op '") + op.name() + "'");
  return o->stat_attrs();
}

void detail::running_stat_update(const Tensor& running, const Tensor& batch_stat, const Tensor& x,
                                 double momentum, bool unbiased, const Loc& loc) {
  dispatch(std::make_shared<const RunningStatOp>(RunningStatAttrs{momentum, unbiased}),
           {running, batch_stat, x}, loc);
}

}  // namespace kiln
