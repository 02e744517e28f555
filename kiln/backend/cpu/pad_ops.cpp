// CPU kernels of pad and pad_backward (Note [kernel table]). Both work from per-dim source
// tables: table[d][o] is the input index that output index o of dim d copies, or -1 for the fill
// value, so one strided loop serves every mode and any number of padded dims. The definitions
// (validation, attributes, infer, vjp) are in kiln/ops/pad.cpp.
#include <algorithm>
#include <vector>

#include "kiln/backend/cpu/loops.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/pad_ops.h"

namespace kiln {

namespace {

using detail::PadMode;

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
void pad_rows(const Tensor& x, const Tensor& out, const Tables& tab, double value) {
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
void pad_backward_rows(const Tensor& g, const Tensor& gx, const Tables& tab) {
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

void pad_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const detail::PadAttrs& a = detail::pad_attrs(op);
  const Tables tab =
      source_tables(in[0].shape(), a.pads, detail::parse_pad_mode(op.name(), a.mode, in[0], {}));
  visit_dtype(in[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    pad_rows<T>(in[0], out[0], tab, a.value);
  });
}

void pad_backward_kernel(const Op& op, const std::vector<Tensor>& in,
                         const std::vector<Tensor>& out) {
  const detail::PadBackwardAttrs& a = detail::pad_backward_attrs(op);
  const Tables tab =
      source_tables(a.input_shape, a.pads, detail::parse_pad_mode(op.name(), a.mode, in[0], {}));
  visit_dtype(in[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>) pad_backward_rows<T>(in[0], out[0], tab);
  });
}

KILN_REGISTER_KERNEL("pad", DeviceType::CPU, pad_kernel);
KILN_REGISTER_KERNEL("pad_backward", DeviceType::CPU, pad_backward_kernel);

}  // namespace

}  // namespace kiln
