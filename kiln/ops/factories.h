#pragma once
#include <initializer_list>
#include <optional>
#include <vector>

#include "kiln/core/rng.h"
#include "kiln/core/tensor.h"

namespace kiln {

Tensor zeros(SizeList shape, TensorOptions options = {}, const Loc& loc = Loc::current());
Tensor ones(SizeList shape, TensorOptions options = {}, const Loc& loc = Loc::current());
Tensor full(SizeList shape, double value, TensorOptions options = {},
            const Loc& loc = Loc::current());
// [start, end) by step; the dtype defaults to int64 when all three are integers, else float32
// (pass options to choose).
Tensor arange(double end, std::optional<TensorOptions> options = std::nullopt,
              const Loc& loc = Loc::current());
// arange(x.size(0)): [0, n) with a size n that stays symbolic while tracing (Note [size
// lists]).
Tensor arange(const SymInt& end, std::optional<TensorOptions> options = std::nullopt,
              const Loc& loc = Loc::current());
Tensor arange(double start, double end, double step = 1.0,
              std::optional<TensorOptions> options = std::nullopt, const Loc& loc = Loc::current());
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {},
                const Loc& loc = Loc::current());
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions options = {},
           const Loc& loc = Loc::current());

// Random tensors from the counter-based generator (default_generator() when none is given).
Tensor rand(SizeList shape, TensorOptions options = {}, Generator* gen = nullptr,
            const Loc& loc = Loc::current());
Tensor randn(SizeList shape, TensorOptions options = {}, Generator* gen = nullptr,
             const Loc& loc = Loc::current());
// Integers in [low, high); int64 unless options say otherwise.
Tensor randint(int64_t low, int64_t high, SizeList shape,
               TensorOptions options = TensorOptions{DType::Int64}, Generator* gen = nullptr,
               const Loc& loc = Loc::current());

// Same shape (and by default dtype and device) as `like`.
Tensor empty_like(const Tensor& like, std::optional<DType> dtype = std::nullopt);
Tensor zeros_like(const Tensor& like, std::optional<DType> dtype = std::nullopt);
Tensor ones_like(const Tensor& like, std::optional<DType> dtype = std::nullopt);
Tensor full_like(const Tensor& like, double value, std::optional<DType> dtype = std::nullopt);
Tensor rand_like(const Tensor& like, Generator* gen = nullptr);
Tensor randn_like(const Tensor& like, Generator* gen = nullptr);

// A tensor holding a copy of `values` with `shape` (default: 1-D); values are converted to
// options.dtype. The element count must match the shape.
template <class T>
Tensor tensor(const std::vector<T>& values, std::optional<Shape> shape = std::nullopt,
              TensorOptions options = TensorOptions{dtype_of<T>()},
              const Loc& loc = Loc::current());
Tensor tensor(std::initializer_list<double> values, TensorOptions options = {},
              const Loc& loc = Loc::current());
// A zero-dim tensor.
Tensor scalar_tensor(double value, TensorOptions options = {});

// A bool mask, true with probability p (dropout's keep mask: the mask `rand(shape) < p` would give
// from the same generator state).
Tensor bernoulli_mask(Shape shape, double p, Device device = kCPU, Generator* gen = nullptr,
                      const Loc& loc = Loc::current());
// The same with like's shape and device (Note [like factories]).
Tensor bernoulli_mask_like(const Tensor& like, double p, Generator* gen = nullptr,
                           const Loc& loc = Loc::current());

namespace detail {
// A number written in an expression (x * 0.5) as a zero-dim tensor that promotes like a Python
// scalar; it is a `full` op, so the number is in the op stream (a trace on meta keeps it).
Tensor wrapped_number(double value, DType dtype, Device device);
}  // namespace detail

}  // namespace kiln
