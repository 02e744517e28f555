// Tensor's PyTorch-style methods (declared in core/tensor.h) and the in-place ops.
#include "kiln/core/grad_mode.h"
#include "kiln/ops/assign.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln {

Tensor Tensor::reshape(SizeList s, const Loc& loc) const {
  return kiln::reshape(*this, std::move(s), loc);
}
Tensor Tensor::view(SizeList s, const Loc& loc) const {
  return kiln::view(*this, std::move(s), loc);
}
Tensor Tensor::permute(std::vector<int64_t> d, const Loc& loc) const {
  return kiln::permute(*this, d, loc);
}
Tensor Tensor::transpose(int64_t d0, int64_t d1, const Loc& loc) const {
  return kiln::transpose(*this, d0, d1, loc);
}
Tensor Tensor::t(const Loc& loc) const {
  if (dim() > 2) fail("t", loc, "expected a tensor with at most 2 dims, but got {}", describe());
  return kiln::transpose(*this, 0, -1, loc);
}
Tensor Tensor::narrow(int64_t d, SymInt start, SymInt length, const Loc& loc) const {
  return kiln::narrow(*this, d, start, length, loc);
}
Tensor Tensor::select(int64_t d, int64_t index, const Loc& loc) const {
  return kiln::select(*this, d, index, loc);
}
Tensor Tensor::expand(SizeList s, const Loc& loc) const {
  return kiln::expand(*this, std::move(s), loc);
}
Tensor Tensor::squeeze(std::optional<int64_t> d, const Loc& loc) const {
  return kiln::squeeze(*this, d, loc);
}
Tensor Tensor::unsqueeze(int64_t d, const Loc& loc) const {
  return kiln::unsqueeze(*this, d, loc);
}
Tensor Tensor::flatten(int64_t s, int64_t e, const Loc& loc) const {
  return kiln::flatten(*this, s, e, loc);
}
Tensor Tensor::contiguous(const Loc& loc) const {
  return kiln::contiguous(*this, loc);
}
Tensor Tensor::clone(const Loc& loc) const {
  return kiln::clone(*this, loc);
}
Tensor Tensor::detach() const {
  return kiln::detach(*this);
}
Tensor Tensor::to(DType dt, const Loc& loc) const {
  return kiln::to_dtype(*this, dt, loc);
}
Tensor Tensor::to(Device dev, const Loc& loc) const {
  if (dev == device()) return *this;
  if (dev.is_meta()) {
    // The same geometry (strides, offset) over a storage of the same size, without memory.
    auto storage = std::make_shared<Storage>(this->storage()->nbytes(), kMeta);
    return Tensor(std::make_shared<TensorImpl>(std::move(storage), shape(), strides(),
                                               storage_offset(), dtype()));
  }
  fail("to", loc,
       "expected a tensor with memory to move to {}, but got {} (meta tensors have no "
       "values to copy)",
       dev.name(), describe());
}
Tensor Tensor::sum(const Loc& loc) const {
  return kiln::sum(*this, {}, false, loc);
}
Tensor Tensor::mean(const Loc& loc) const {
  return kiln::mean(*this, {}, false, loc);
}

namespace {

// Note [in-place ops]: an in-place op computes its result with the out-of-place op (so the
// gradient is the out-of-place op's), writes it into self's memory, bumps the version counter
// (saved copies of self become invalid, and backward says which op modified them), and moves
// self's history to the result's. When the out-of-place op saves its inputs for backward, it gets
// a clone of self, since self's memory is about to change.
// Note [overlapping writes]: in an expanded view several elements share one memory location, so
// an elementwise update would read values it already wrote; like PyTorch, only fill_/zero_ (one
// value everywhere) may write such a tensor.
bool has_internal_overlap(const Tensor& t) {
  if (t.numel() == 0) return false;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.strides()[d] == 0 && t.dim_size(d) > 1) return true;
  return false;
}

template <class F>
Tensor& apply_inplace(Tensor& self, const char* name, const Loc& loc, bool saves_self,
                      const Tensor& other, F compute, bool one_value = false) {
  const bool recording = GradMode::is_enabled() &&
                         (self.requires_grad() || (other.defined() && other.requires_grad()));
  if (GradMode::is_enabled() && self.requires_grad() && self.is_leaf())
    fail(name, loc,
         "expected a tensor that does not require grad, but got a leaf {} that requires grad; "
         "modify it under NoGradGuard (as optimizers do) or use the out-of-place op",
         self.describe());
  if (!one_value && has_internal_overlap(self))
    fail(name, loc,
         "expected a tensor whose elements have distinct memory, but got {} with strides {} (an "
         "expanded view: several elements share one location); clone() it first",
         self.describe(), shape_str(self.strides()));
  if (recording && self.is_view())
    fail(name, loc,
         "in-place modification of a view ({}) while recording gradients is not supported yet; "
         "use the out-of-place op",
         self.describe());
  Tensor input = recording && saves_self ? kiln::clone(self, loc) : self;
  // x.mul_(x): the other operand is self too, and must be the same snapshot.
  Tensor other_in = other.defined() && other.is_same(self) ? input : other;
  Tensor result = compute(input, other_in);
  // Note [overwriting history]: when the new values depend on nothing that requires grad
  // (copy_ from a constant, fill_) but self did, self keeps requiring grad and its old history
  // gets a zero gradient, as PyTorch's CopyBackwards gives (defect: the old history stayed
  // attached and got the full gradient). where(true, result, old) is that node.
  if (recording && self.requires_grad() && !result.requires_grad())
    result = kiln::where(scalar_tensor(1.0, {DType::Bool}),
                         kiln::to_dtype(result, self.dtype(), loc), kiln::clone(self, loc), loc);
  if (result.shape() != self.shape())
    fail(name, loc,
         "expected a result of the modified tensor's shape {}, but got {} (in-place ops "
         "cannot broadcast the tensor they modify)",
         shape_str(self.shape()), shape_str(result.shape()));
  if (is_floating(result.dtype()) && !is_floating(self.dtype()))
    fail(name, loc,
         "expected a result castable to {}, but got {} (cannot write floats into an "
         "integer tensor in place)",
         self.describe(), result.describe());
  if (self.dtype() == DType::Bool && result.dtype() != DType::Bool)
    fail(name, loc,
         "expected a result castable to {}, but got {} (cannot write numbers into a bool tensor "
         "in place)",
         self.describe(), result.describe());
  if (!result.is_same(self)) assign(self, result, loc);
  self.storage()->bump_version(name, loc);
  if (recording && result.requires_grad()) {
    AutogradMeta& meta = self.impl()->autograd();
    meta.grad_fn = result.grad_fn();
    meta.output_nr = result.output_nr();
    self.storage()->bump_history_version();
  }
  return self;
}

}  // namespace

Tensor& Tensor::add_(const Tensor& o, const Loc& loc) {
  return apply_inplace(*this, "add_", loc, false, o,
                       [&](const Tensor& s, const Tensor& t) { return add(s, t, loc); });
}
Tensor& Tensor::sub_(const Tensor& o, const Loc& loc) {
  return apply_inplace(*this, "sub_", loc, false, o,
                       [&](const Tensor& s, const Tensor& t) { return sub(s, t, loc); });
}
Tensor& Tensor::mul_(const Tensor& o, const Loc& loc) {
  return apply_inplace(*this, "mul_", loc, true, o,
                       [&](const Tensor& s, const Tensor& t) { return mul(s, t, loc); });
}
Tensor& Tensor::div_(const Tensor& o, const Loc& loc) {
  return apply_inplace(*this, "div_", loc, true, o,
                       [&](const Tensor& s, const Tensor& t) { return div(s, t, loc); });
}
Tensor& Tensor::add_(double o, const Loc& loc) {
  return add_(scalar_like(o, *this), loc);
}
Tensor& Tensor::sub_(double o, const Loc& loc) {
  return sub_(scalar_like(o, *this), loc);
}
Tensor& Tensor::mul_(double o, const Loc& loc) {
  return mul_(scalar_like(o, *this), loc);
}
Tensor& Tensor::div_(double o, const Loc& loc) {
  return div_(scalar_like(o, *this), loc);
}

Tensor& Tensor::clamp_(std::optional<double> lo, std::optional<double> hi, const Loc& loc) {
  return apply_inplace(*this, "clamp_", loc, true, Tensor(),
                       [&](const Tensor& s, const Tensor&) { return clamp(s, lo, hi, loc); });
}

Tensor& Tensor::copy_(const Tensor& src, const Loc& loc) {
  // x.copy_(x) writes every element its own value, so it may target an expanded view.
  return apply_inplace(
      *this, "copy_", loc, false, src,
      [&](const Tensor& s, const Tensor&) {
        if (!detail::devices_compatible(src, s))
          fail("copy_", loc, "expected a source on {}, but got {}", s.device().name(),
               src.describe());
        // Assignment converts any dtype, unlike arithmetic.
        return kiln::expand(kiln::to_dtype(src, s.dtype(), loc), s.shape(), loc);
      },
      src.is_same(*this));
}

// fill_ and zero_: the overwritten values get a zero gradient (Note [overwriting history]).
Tensor& Tensor::fill_(double value, const Loc& loc) {
  if (GradMode::is_enabled() && requires_grad()) {
    const Shape s = shape();
    const TensorOptions options{dtype(), device()};
    return apply_inplace(
        *this, "fill_", loc, false, Tensor(),
        [&](const Tensor&, const Tensor&) { return full(s, value, options, loc); }, true);
  }
  assign_fill(*this, value, loc);
  storage()->bump_version("fill_", loc);
  if (impl()->autograd_) impl()->autograd_->grad_fn.reset();
  return *this;
}

Tensor& Tensor::zero_(const Loc& loc) {
  return fill_(0.0, loc);
}

}  // namespace kiln
