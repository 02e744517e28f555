// The copying counterparts of the view ops: clone (and contiguous, which clones only when it
// must) and to_dtype. Each writes a fresh tensor; their gradients pass straight through.
// Definitions only; the kernels (a strided, converting copy) are in
// kiln/backend/cpu/copy_ops.cpp (Note [kernel table]).
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

class CloneOp final : public Op {
 public:
  const char* name() const override { return "clone"; }
  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc&) const override {
    return {{in[0].shape(), in[0].dtype(), in[0].device()}};
  }
  Saves saves() const override { return {false, false}; }
  std::vector<Tensor> vjp(const VjpContext& ctx) const override { return {ctx.grads[0]}; }
};

class ToDtypeOp final : public Op {
 public:
  explicit ToDtypeOp(DType dtype) : dtype_(dtype) {}
  const char* name() const override { return "to_dtype"; }
  bool memory_bound() const override { return true; }  // Note [rematerialization]
  nlohmann::json attrs() const override { return {{"dtype", dtype_name(dtype_)}}; }
  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc&) const override {
    return {{in[0].shape(), dtype_, in[0].device()}};
  }
  bool differentiable() const override { return is_floating(dtype_); }
  Saves saves() const override { return {false, false}; }
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    return {to_dtype(ctx.grads[0], ctx.input_metas[0].dtype)};
  }

 private:
  DType dtype_;
};

KILN_REGISTER_OP("clone", (OpSchema{{"x"}, {"y"}, AutocastPolicy::kKeep}), no_attrs<CloneOp>());
KILN_REGISTER_OP("to_dtype", (OpSchema{{"x"}, {"y"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const ToDtypeOp>(a.dtype("dtype"));
                 });

}  // namespace

Tensor clone(const Tensor& x, const Loc& loc) {
  return call_op<CloneOp>({x}, loc);
}

Tensor contiguous(const Tensor& x, const Loc& loc) {
  return x.is_contiguous() ? x : clone(x, loc);
}

Tensor contiguous(const Tensor& x, MemoryFormat format, const Loc& loc) {
  if (format == MemoryFormat::kContiguous) return contiguous(x, loc);
  if (x.dim() != 4)
    fail("contiguous", loc,
         "expected a tensor of rank 4 (N,C,H,W) for channels-last memory, but got {}",
         x.describe());
  if (x.is_channels_last()) return x;
  return permute(contiguous(permute(x, {0, 2, 3, 1}, loc), loc), {0, 3, 1, 2}, loc);
}

Tensor to_dtype(const Tensor& x, DType dtype, const Loc& loc) {
  return x.dtype() == dtype ? x : call_op<ToDtypeOp>({x}, loc, dtype);
}

}  // namespace kiln
