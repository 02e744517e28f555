#include "kiln/core/tensor.h"

#include <limits>
#include <ostream>
#include <utility>

#include "kiln/core/allocator.h"

namespace kiln {

SymInt Tensor::size(int64_t d) const {
  return sym_size(*this, d);
}
SymSizes Tensor::sizes() const {
  return sym_sizes(*this);
}
int64_t Tensor::dim_size(int64_t d) const {
  return shape()[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  return strides()[wrap_dim(d, dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  const Shape& sh = shape();
  const Strides& st = strides();
  int64_t expected = 1;
  for (size_t i = sh.size(); i-- > 0;) {
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

std::string Tensor::describe() const {
  if (!impl_) return "undefined tensor";
  return fmt::format("{}{} on {}", dtype_name(dtype()), shape_str(shape()), device().name());
}

namespace {
thread_local detail::ValueReadHook value_read_hook = nullptr;
}  // namespace

void detail::meta_value_read(const Tensor& t, const char* what, const Loc& loc) {
  if (value_read_hook) value_read_hook(t, what, loc);
  fail(what, loc, "expected a tensor with memory, but got {}", t.describe());
}

detail::ValueReadHook detail::set_value_read_hook(ValueReadHook hook) {
  return std::exchange(value_read_hook, hook);
}

bool detail::has_value_read_hook() {
  return value_read_hook != nullptr;
}

void* Tensor::raw_data() const {
  if (is_meta()) detail::meta_value_read(*this, "data", Loc::current());
  return static_cast<char*>(storage()->data()) + storage_offset() * itemsize(dtype());
}

bool Tensor::requires_grad() const {
  auto& a = checked().autograd_;
  return a && (a->requires_grad || a->grad_fn);
}

Tensor& Tensor::set_requires_grad(bool r, const Loc& loc) {
  if (!is_leaf())
    fail("requires_grad_", loc,
         "expected a leaf tensor, but got a non-leaf {} (use detach() to make a leaf)", describe());
  if (r && !is_floating(dtype()))
    fail("requires_grad_", loc, "expected a floating-point tensor to require grad, but got {}",
         describe());
  checked().autograd().requires_grad = r;
  return *this;
}

bool Tensor::is_leaf() const {
  auto& a = checked().autograd_;
  return !a || !a->grad_fn;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  auto& a = checked().autograd_;
  return a ? a->grad_fn : none;
}

uint32_t Tensor::output_nr() const {
  auto& a = checked().autograd_;
  return a ? a->output_nr : 0;
}

Tensor Tensor::grad() const {
  auto& a = checked().autograd_;
  return a && a->grad ? *a->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  auto& a = checked().autograd();
  if (g.defined())
    a.grad = std::make_shared<Tensor>(g);
  else
    a.grad.reset();
}

bool Tensor::retains_grad() const {
  auto& a = checked().autograd_;
  return a && a->retains_grad;
}

double Tensor::item(const Loc& loc) const {
  if (numel() != 1)
    fail("item", loc, "expected a tensor with exactly one element, but got {} with {} elements",
         describe(), numel());
  if (is_meta()) detail::meta_value_read(*this, "item", loc);
  return visit_dtype(dtype(), [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    return static_cast<double>(static_cast<compute_t<T>>(*static_cast<const T*>(raw_data())));
  });
}

template <class T>
std::vector<T> Tensor::to_vector(const Loc& loc) const {
  if (is_meta()) detail::meta_value_read(*this, "to_vector", loc);
  std::vector<T> out(static_cast<size_t>(numel()));
  if (out.empty()) return out;
  const Shape& sh = shape();
  const Strides& st = strides();
  visit_dtype(dtype(), [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* base = static_cast<const S*>(raw_data());
    std::vector<int64_t> idx(sh.size(), 0);
    int64_t off = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = static_cast<T>(static_cast<compute_t<S>>(base[off]));
      for (size_t d = sh.size(); d-- > 0;) {
        if (++idx[d] < sh[d]) {
          off += st[d];
          break;
        }
        off -= st[d] * (sh[d] - 1);
        idx[d] = 0;
      }
    }
  });
  return out;
}

template std::vector<float> Tensor::to_vector<float>(const Loc&) const;
template std::vector<double> Tensor::to_vector<double>(const Loc&) const;
template std::vector<int64_t> Tensor::to_vector<int64_t>(const Loc&) const;
template std::vector<int32_t> Tensor::to_vector<int32_t>(const Loc&) const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>(const Loc&) const;
template std::vector<bool> Tensor::to_vector<bool>(const Loc&) const;

Tensor empty(Shape shape, TensorOptions options, const Loc& loc) {
  return detail::empty_for("empty", std::move(shape), options, loc);
}

void detail::check_allocation(std::string_view op, const Shape& shape, const TensorOptions& options,
                              const Loc& loc) {
  const int64_t numel = shape_numel(shape, op, loc);
  size_t nbytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(numel), itemsize(options.dtype), &nbytes) ||
      nbytes > static_cast<size_t>(std::numeric_limits<int64_t>::max()))
    fail(op, loc, "shape {} of {} needs more bytes than can be addressed ({} elements)",
         shape_str(shape), dtype_name(options.dtype), numel);
  if (options.memory_format == MemoryFormat::kChannelsLast && shape.size() != 4)
    fail(op, loc, "expected a shape of rank 4 for channels-last memory, but got {}",
         shape_str(shape));
}

Tensor detail::empty_for(std::string_view op, Shape shape, TensorOptions options, const Loc& loc) {
  check_allocation(op, shape, options, loc);
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * itemsize(options.dtype);
  std::shared_ptr<Storage> storage;
  try {
    storage = std::make_shared<Storage>(nbytes, options.device);
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(error_message(op, e.detail(), loc), e.detail());
  }
  Strides strides = options.memory_format == MemoryFormat::kChannelsLast
                        ? channels_last_strides(shape)
                        : contiguous_strides(shape);
  Tensor t(std::make_shared<TensorImpl>(std::move(storage), std::move(shape), std::move(strides), 0,
                                        options.dtype));
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>(base.storage(), std::move(shape), std::move(strides),
                                           offset, base.dtype());
  impl->is_view_ = true;
  impl->view_history_version_ = base.storage()->history_version();
  return Tensor(std::move(impl));
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.to_string();
}

}  // namespace kiln
