#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/memory_format.h"
#include "kiln/core/shape.h"
#include "kiln/core/size_list.h"
#include "kiln/core/storage.h"

namespace kiln {

namespace autograd {
class Node;
}

class Tensor;
using Loc = std::source_location;
// A gradient hook: receives the gradient, returns a replacement or an undefined Tensor to keep it.
using GradHook = std::function<Tensor(const Tensor&)>;

// Autograd state of one tensor. Lives in core because the tensor owns it; only the autograd layer
// gives it meaning.
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<Tensor> grad;                    // accumulated gradient of a leaf
  std::shared_ptr<autograd::Node> grad_fn;         // producer of a non-leaf
  std::weak_ptr<autograd::Node> grad_accumulator;  // AccumulateGrad node of a leaf, shared by uses
  uint32_t output_nr = 0;
  std::vector<GradHook> leaf_hooks;  // hooks on a leaf run before accumulation
  bool retains_grad = false;
};

class TensorImpl {
 public:
  TensorImpl(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset,
             DType dtype)
      : storage_(std::move(storage)),
        shape_(std::move(shape)),
        strides_(std::move(strides)),
        offset_(offset),
        dtype_(dtype) {
    shape_numel(shape_, "tensor");  // every tensor's element count fits in int64
  }

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;  // in elements
  DType dtype_;
  bool is_view_ = false;               // shares storage with the tensor it was made from
  uint64_t view_history_version_ = 0;  // the storage's history_version when the view was made
  bool is_wrapped_number_ = false;  // a C++ scalar turned into a tensor (lowest promotion priority)
  std::unique_ptr<AutogradMeta> autograd_;

  AutogradMeta& autograd() {
    if (!autograd_) autograd_ = std::make_unique<AutogradMeta>();
    return *autograd_;
  }
};

struct TensorOptions {
  DType dtype = DType::Float32;
  Device device = kCPU;
  bool requires_grad = false;
  MemoryFormat memory_format = MemoryFormat::kContiguous;  // kChannelsLast needs rank 4
  TensorOptions& with_dtype(DType d) {
    dtype = d;
    return *this;
  }
  TensorOptions& with_device(Device d) {
    device = d;
    return *this;
  }
  TensorOptions& with_requires_grad(bool r) {
    requires_grad = r;
    return *this;
  }
};

// A handle to a TensorImpl; copies share it, like torch.Tensor in Python.
//
// The methods in the second half (views, arithmetic, backward) are declared here for a PyTorch-like
// surface and defined in the ops and autograd layers; core itself never calls them.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // --- metadata -------------------------------------------------------------------------------
  const Shape& shape() const { return checked().shape_; }
  const Strides& strides() const { return checked().strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  // The size of dim d (negative d counts from the end). A SymInt: a plain integer in eager code;
  // while a trace runs, the traced value's dim, so that sizes computed from it stay symbolic
  // (Note [symbolic sizes]). Library code that needs a number, never a symbol, uses dim_size.
  SymInt size(int64_t d) const;
  SymSizes sizes() const;
  // The size of dim d as a number (while tracing, the size at the traced sizes).
  int64_t dim_size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape_numel(shape()); }
  int64_t storage_offset() const { return checked().offset_; }
  DType dtype() const { return checked().dtype_; }
  Device device() const { return checked().storage_->device(); }
  bool is_meta() const { return device().is_meta(); }
  bool is_contiguous() const;
  // Note [channels-last] (memory_format.h).
  bool is_channels_last() const { return kiln::is_channels_last(shape(), strides()); }
  bool is_view() const { return checked().is_view_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(dtype()); }
  const std::shared_ptr<Storage>& storage() const { return checked().storage_; }
  uint64_t version() const { return storage()->version(); }
  // "float32[8, 28, 28] on cpu" — used in every error message.
  std::string describe() const;

  // --- raw memory -----------------------------------------------------------------------------
  void* raw_data() const;  // address of element 0 (throws on meta tensors)
  template <class T>
  T* data(const Loc& loc = Loc::current()) const {
    if (dtype_of<T>() != dtype())
      fail("data", loc, "expected a tensor of dtype {}, but got {}", dtype_name(dtype_of<T>()),
           describe());
    return static_cast<T*>(raw_data());
  }

  // --- autograd state -------------------------------------------------------------------------
  bool requires_grad() const;
  // Only leaves may be set; returns *this for chaining.
  Tensor& set_requires_grad(bool r, const Loc& loc = Loc::current());
  bool is_leaf() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t output_nr() const;
  // The accumulated gradient (undefined until a backward reaches this leaf).
  Tensor grad() const;
  void set_grad(const Tensor& g);
  // Keeps .grad() for a non-leaf after backward.
  void retain_grad(const Loc& loc = Loc::current());
  bool retains_grad() const;
  // Registers a hook that sees (and may replace) this tensor's gradient during backward.
  void register_hook(GradHook hook, const Loc& loc = Loc::current());

  // --- values ---------------------------------------------------------------------------------
  // The single value of a one-element tensor, converted to double.
  double item(const Loc& loc = Loc::current()) const;
  template <class T>
  T item(const Loc& loc = Loc::current()) const {
    return static_cast<T>(item(loc));
  }
  // Copies the values (any layout) into a vector of T (converted).
  template <class T>
  std::vector<T> to_vector(const Loc& loc = Loc::current()) const;
  std::string to_string() const;  // PyTorch-like printing

  // --- defined in the ops layer ---------------------------------------------------------------
  Tensor reshape(SizeList shape, const Loc& loc = Loc::current()) const;
  Tensor view(SizeList shape, const Loc& loc = Loc::current()) const;
  Tensor permute(std::vector<int64_t> dims, const Loc& loc = Loc::current()) const;
  Tensor transpose(int64_t d0, int64_t d1, const Loc& loc = Loc::current()) const;
  Tensor t(const Loc& loc = Loc::current()) const;
  Tensor narrow(int64_t dim, SymInt start, SymInt length, const Loc& loc = Loc::current()) const;
  Tensor select(int64_t dim, int64_t index, const Loc& loc = Loc::current()) const;
  Tensor expand(SizeList shape, const Loc& loc = Loc::current()) const;
  Tensor squeeze(std::optional<int64_t> dim = std::nullopt, const Loc& loc = Loc::current()) const;
  Tensor unsqueeze(int64_t dim, const Loc& loc = Loc::current()) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1, const Loc& loc = Loc::current()) const;
  Tensor contiguous(const Loc& loc = Loc::current()) const;
  Tensor clone(const Loc& loc = Loc::current()) const;
  // Shares storage, no history, requires_grad false.
  Tensor detach() const;
  Tensor to(DType dtype, const Loc& loc = Loc::current()) const;
  Tensor to(Device device, const Loc& loc = Loc::current()) const;
  Tensor sum(const Loc& loc = Loc::current()) const;
  Tensor mean(const Loc& loc = Loc::current()) const;

  // In-place forms; they bump the version counter. Where the out-of-place op's gradient needs
  // this tensor's old value (mul_, div_, clamp_), kiln keeps a copy, so x.mul_(x) and friends
  // differentiate where PyTorch reports "modified by an inplace operation". An expanded view
  // (several elements in one location) may only be written by fill_/zero_ and x.copy_(x); a view
  // may not be modified while recording gradients (not supported yet).
  Tensor& add_(const Tensor& other, const Loc& loc = Loc::current());
  Tensor& sub_(const Tensor& other, const Loc& loc = Loc::current());
  Tensor& mul_(const Tensor& other, const Loc& loc = Loc::current());
  Tensor& div_(const Tensor& other, const Loc& loc = Loc::current());
  Tensor& add_(double other, const Loc& loc = Loc::current());
  Tensor& sub_(double other, const Loc& loc = Loc::current());
  Tensor& mul_(double other, const Loc& loc = Loc::current());
  Tensor& div_(double other, const Loc& loc = Loc::current());
  Tensor& clamp_(std::optional<double> min, std::optional<double> max,
                 const Loc& loc = Loc::current());
  Tensor& zero_(const Loc& loc = Loc::current());
  Tensor& fill_(double value, const Loc& loc = Loc::current());
  Tensor& copy_(const Tensor& src, const Loc& loc = Loc::current());

  // --- defined in the autograd layer ----------------------------------------------------------
  // Gradient of this tensor (scalar unless grad_output is given) into every leaf that requires it.
  void backward(const Tensor& grad_output = Tensor(), bool retain_graph = false,
                bool create_graph = false, const Loc& loc = Loc::current()) const;

 private:
  TensorImpl& checked() const {
    if (!impl_) throw Error("[tensor] expected a defined tensor, but got an undefined one");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

// Allocates an uninitialized tensor with contiguous strides, or channels-last ones when
// options.memory_format asks (no memory on meta).
Tensor empty(Shape shape, TensorOptions options = {}, const Loc& loc = Loc::current());
namespace detail {
// empty() whose errors (sizes, out of memory) name `op`: the factories' common allocation.
Tensor empty_for(std::string_view op, Shape shape, TensorOptions options, const Loc& loc);
// The size checks of empty_for, without allocating (shape inference of factory ops).
void check_allocation(std::string_view op, const Shape& shape, const TensorOptions& options,
                      const Loc& loc);

// Note [value reads]
// ~~~~~~~~~~~~~~~~~~
// Reading a meta tensor's values (item, to_vector, data, printing) is an error. While a graph is
// traced the meta tensors are the trace's stand-ins, and such a read means the code depends on
// data the trace does not have: the tracer (a higher layer) installs a hook on its thread that
// raises an error saying so, naming the traced function and the value. The hook must throw; with
// none installed, the read fails with the plain meta error.
using ValueReadHook = void (*)(const Tensor& t, const char* what, const Loc& loc);
// Installs `hook` on this thread (nullptr: none) and returns the one it replaces.
ValueReadHook set_value_read_hook(ValueReadHook hook);
// Whether a hook is installed on this thread.
bool has_value_read_hook();
// The read: the hook's error, else "[what] expected a tensor with memory, but got ...".
[[noreturn]] void meta_value_read(const Tensor& t, const char* what, const Loc& loc);
}  // namespace detail
// A new tensor handle over the same storage with the given geometry (a view).
Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset);

std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace kiln
