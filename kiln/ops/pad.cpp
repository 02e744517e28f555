// pad (constant / reflect / replicate) and pad_backward. Both work from per-dim source tables:
// table[d][o] is the input index that output index o of dim d copies, or -1 for the fill value,
// so one strided kernel serves every mode and any number of padded dims.
#include "kiln/ops/pad.h"

#include <fmt/ranges.h>
#include <algorithm>

#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/loops.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

enum class PadMode { kConstant, kReflect, kReplicate };

PadMode parse_mode(const char* op, const std::string& mode, const Tensor& t, const Loc& loc) {
  if (mode == "constant") return PadMode::kConstant;
  if (mode == "reflect") return PadMode::kReflect;
  if (mode == "replicate") return PadMode::kReplicate;
  fail(op, loc, "expected mode \"constant\", \"reflect\" or \"replicate\", but got \"{}\" for {}",
       mode, t.describe());
}

std::string pads_str(const std::vector<int64_t>& pads) {
  return fmt::format("({})", fmt::join(pads, ", "));
}

// Validates pads against `in` and returns the padded shape. `t` is the tensor the caller passed
// (x for pad, grad for pad_backward), for the error text.
Shape padded_shape(const char* op, const Shape& in, const std::vector<int64_t>& pads, PadMode mode,
                   const std::string& mode_name, const Tensor& t, const Loc& loc) {
  const int64_t rank = static_cast<int64_t>(in.size());
  const int64_t k = static_cast<int64_t>(pads.size()) / 2;
  if (pads.size() % 2 != 0 || k > rank)
    fail(op, loc, "expected an even number of pads, at most 2 per dim, but got pads {} for {}",
         pads_str(pads), t.describe());
  if (mode != PadMode::kConstant && k > 3)
    fail(op, loc, "expected {} padding of at most the last 3 dims, but got pads {} for {}",
         mode_name, pads_str(pads), t.describe());
  Shape out = in;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t d = rank - 1 - j, before = pads[2 * j], after = pads[2 * j + 1];
    out[d] = in[d] + before + after;
    bool ok = out[d] >= 0;
    if (mode == PadMode::kReflect)
      ok = before >= 0 && after >= 0 && before < in[d] && after < in[d];
    if (mode == PadMode::kReplicate) ok = before >= 0 && after >= 0 && in[d] > 0;
    if (!ok)
      fail(op, loc, "expected {} pads {} valid for dim {} of size {} ({}), but got pads {} for {}",
           mode_name, pads_str({before, after}), d, in[d],
           mode == PadMode::kReflect     ? "each pad in [0, size)"
           : mode == PadMode::kReplicate ? "pads >= 0 on a non-empty dim"
                                         : "the padded size must be >= 0",
           pads_str(pads), t.describe());
  }
  return out;
}

using Tables = std::vector<std::vector<int64_t>>;  // empty table: the identity

Tables source_tables(const Shape& in, const std::vector<int64_t>& pads, PadMode mode) {
  const int64_t rank = static_cast<int64_t>(in.size());
  Tables tab(in.size());
  for (size_t j = 0; j < pads.size() / 2; ++j) {
    const int64_t d = rank - 1 - static_cast<int64_t>(j), n = in[d], before = pads[2 * j];
    const int64_t len = n + before + pads[2 * j + 1];
    tab[d].resize(len);
    for (int64_t o = 0; o < len; ++o) {
      int64_t s = o - before;
      if (mode == PadMode::kConstant) {
        if (s < 0 || s >= n) s = -1;
      } else if (mode == PadMode::kReflect) {
        if (s < 0) s = -s;
        if (s >= n) s = 2 * (n - 1) - s;
      } else {
        s = std::clamp<int64_t>(s, 0, n - 1);
      }
      tab[d][o] = s;
    }
  }
  return tab;
}

// Splits row index `row` (row-major over shape[0..rank-2]) into per-dim indices.
void unravel_row(int64_t row, const Shape& shape, std::vector<int64_t>& idx) {
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
    idx[d] = row % shape[d];
    row /= shape[d];
  }
}

template <class T>
void pad_kernel(const Tensor& x, const Tensor& out, const Tables& tab, double value) {
  const Shape& os = out.shape();
  const Strides& xs = x.strides();
  const int64_t rank = static_cast<int64_t>(os.size());
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  const T fill = static_cast<T>(static_cast<compute_t<T>>(value));
  if (rank == 0) {
    po[0] = px[0];
    return;
  }
  const int64_t len = os.back(), last = rank - 1;
  if (len == 0) return;
  const int64_t rows = out.numel() / len;
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / len), [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> idx(rank);
    for (int64_t row = r0; row < r1; ++row) {
      unravel_row(row, os, idx);
      int64_t base = 0;
      bool valid = true;
      for (int64_t d = 0; d < last && valid; ++d) {
        const int64_t s = tab[d].empty() ? idx[d] : tab[d][idx[d]];
        valid = s >= 0;
        base += s * xs[d];
      }
      T* dst = po + row * len;
      if (!valid) {
        std::fill(dst, dst + len, fill);
      } else if (tab[last].empty()) {
        for (int64_t o = 0; o < len; ++o) dst[o] = px[base + o * xs[last]];
      } else {
        for (int64_t o = 0; o < len; ++o) {
          const int64_t s = tab[last][o];
          dst[o] = s < 0 ? fill : px[base + s * xs[last]];
        }
      }
    }
  });
}

// Each input element gathers the output elements that copied it (the inverse tables), so every
// sum has one writer and a fixed order: deterministic for any thread count.
template <class T>
void pad_backward_kernel(const Tensor& g, const Tensor& gx, const Tables& tab) {
  const Shape& is = gx.shape();
  const Strides& gs = g.strides();
  const int64_t rank = static_cast<int64_t>(is.size());
  const T* pg = static_cast<const T*>(g.raw_data());
  T* po = static_cast<T*>(gx.raw_data());
  if (rank == 0) {
    po[0] = pg[0];
    return;
  }
  std::vector<std::vector<std::vector<int64_t>>> sources(rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (tab[d].empty()) continue;
    sources[d].resize(is[d]);
    for (int64_t o = 0; o < static_cast<int64_t>(tab[d].size()); ++o)
      if (tab[d][o] >= 0) sources[d][tab[d][o]].push_back(o);
  }
  const int64_t len = is.back(), last = rank - 1;
  if (len == 0) return;
  const int64_t rows = gx.numel() / len;
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / len), [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> idx(rank), bases, next;
    for (int64_t row = r0; row < r1; ++row) {
      unravel_row(row, is, idx);
      bases.assign(1, 0);
      for (int64_t d = 0; d < last; ++d) {
        if (tab[d].empty()) {
          for (int64_t& b : bases) b += idx[d] * gs[d];
          continue;
        }
        next.clear();
        for (int64_t b : bases)
          for (int64_t o : sources[d][idx[d]]) next.push_back(b + o * gs[d]);
        bases.swap(next);
      }
      T* dst = po + row * len;
      for (int64_t i = 0; i < len; ++i) {
        double acc = 0;
        for (int64_t b : bases) {
          if (tab[last].empty()) {
            acc += static_cast<double>(pg[b + i * gs[last]]);
          } else {
            for (int64_t o : sources[last][i]) acc += static_cast<double>(pg[b + o * gs[last]]);
          }
        }
        dst[i] = static_cast<T>(static_cast<compute_t<T>>(acc));
      }
    }
  });
}

std::vector<int64_t> negated(std::vector<int64_t> pads) {
  for (int64_t& p : pads) p = -p;
  return pads;
}

class PadOp final : public Op {
 public:
  PadOp(std::vector<int64_t> pads, std::string mode, double value)
      : pads_(std::move(pads)), mode_(std::move(mode)), value_(value) {}
  const char* name() const override { return "pad"; }
  nlohmann::json attrs() const override {
    return {{"pads", pads_}, {"mode", mode_}, {"value", attr_double(value_)}};
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    PadMode m = parse_mode(name(), mode_, x, loc);
    return {{padded_shape(name(), x.shape(), pads_, m, mode_, x, loc), x.dtype(), x.device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    const Tables tab = source_tables(in[0].shape(), pads_, parse_mode(name(), mode_, in[0], {}));
    visit_dtype(in[0].dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      pad_kernel<T>(in[0], out[0], tab, value_);
    });
  }

  Saves saves() const override { return {false, false}; }

  // A constant pad's adjoint is the opposite pad: crop what was added, zero-fill what was cropped.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    if (mode_ == "constant") return {pad(ctx.grads[0], negated(pads_), "constant", 0.0)};
    return {pad_backward(ctx.grads[0], ctx.input_metas[0].shape, pads_, mode_)};
  }

 private:
  std::vector<int64_t> pads_;
  std::string mode_;
  double value_;
};

class PadBackwardOp final : public Op {
 public:
  PadBackwardOp(Shape input_shape, std::vector<int64_t> pads, std::string mode)
      : input_shape_(std::move(input_shape)), pads_(std::move(pads)), mode_(std::move(mode)) {}
  const char* name() const override { return "pad_backward"; }
  nlohmann::json attrs() const override {
    return {{"input_shape", input_shape_}, {"pads", pads_}, {"mode", mode_}};
  }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& g = in[0];
    PadMode m = parse_mode(name(), mode_, g, loc);
    if (!is_floating(g.dtype()))
      fail(name(), loc, "expected a floating-point grad, but got {}", g.describe());
    Shape out = padded_shape(name(), input_shape_, pads_, m, mode_, g, loc);
    if (out != g.shape())
      fail(name(), loc, "expected grad of the padded shape {} (input {} with pads {}), but got {}",
           shape_str(out), shape_str(input_shape_), pads_str(pads_), g.describe());
    return {{input_shape_, g.dtype(), g.device()}};
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    const Tables tab = source_tables(input_shape_, pads_, parse_mode(name(), mode_, in[0], {}));
    visit_dtype(in[0].dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<compute_t<T>>)
        pad_backward_kernel<T>(in[0], out[0], tab);
    });
  }

  Saves saves() const override { return {false, false}; }

  // Linear in grad; its adjoint is pad itself (with zeros where pad fills).
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    if (!ctx.needs_grad[0]) return {Tensor()};
    return {pad(ctx.grads[0], pads_, mode_, 0.0)};
  }

 private:
  Shape input_shape_;
  std::vector<int64_t> pads_;
  std::string mode_;
};

KILN_REGISTER_OP("pad", (OpSchema{{"input"}, {"output"}}), [](const Attrs& a) -> OpPtr {
  return std::make_shared<const PadOp>(a.ints("pads"), a.s("mode"), a.f("value"));
});
KILN_REGISTER_OP("pad_backward", (OpSchema{{"grad_output"}, {"grad_input"}}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const PadBackwardOp>(a.ints("input_shape"),
                                                                a.ints("pads"), a.s("mode"));
                 });

}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode, double value,
           const Loc& loc) {
  return call_op<PadOp>({x}, loc, pads, mode, value);
}

Tensor pad_backward(const Tensor& grad, const Shape& input_shape, const std::vector<int64_t>& pads,
                    const std::string& mode, const Loc& loc) {
  return call_op<PadBackwardOp>({grad}, loc, input_shape, pads, mode);
}

}  // namespace kiln
