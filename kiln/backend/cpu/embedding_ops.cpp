// CPU kernels of embedding (row lookup) and embedding_backward (row scatter-add) (Note [kernel
// table]). The definitions (attributes, infer, vjp) and the index check the kernels run first are
// in kiln/ops/embedding.cpp.
#include <cstring>

#include "kiln/backend/cpu/loops.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/embedding_ops.h"
#include "kiln/ops/kernel_table.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

void embedding_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const Tensor& w = in[0];
  const std::vector<int64_t> idx = detail::checked_embedding_indices(
      op.name(), in[1], w.dim_size(0), "weight " + w.describe(), kernel_call_site());
  const int64_t d = w.dim_size(1), n = static_cast<int64_t>(idx.size());
  const int64_t s0 = w.stride(0), s1 = w.stride(1);
  if (out[0].numel() == 0) return;  // D = 0 or no indices: nothing to copy (and maybe no memory)
  visit_dtype(w.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pw = static_cast<const T*>(w.raw_data());
    T* po = static_cast<T*>(out[0].raw_data());
    parallel_for(0, n, std::max<int64_t>(1, kGrain / std::max<int64_t>(d, 1)),
                 [&](int64_t i0, int64_t i1) {
                   for (int64_t i = i0; i < i1; ++i) {
                     const T* row = pw + idx[i] * s0;
                     T* dst = po + i * d;
                     if (s1 == 1)
                       std::memcpy(dst, row, static_cast<size_t>(d) * sizeof(T));
                     else
                       for (int64_t j = 0; j < d; ++j) dst[j] = row[j * s1];
                   }
                 });
  });
}

void embedding_backward_kernel(const Op& op, const std::vector<Tensor>& in,
                               const std::vector<Tensor>& out) {
  const detail::EmbeddingBackwardAttrs& a = detail::embedding_backward_attrs(op);
  Tensor g = in[0];
  if (!g.is_contiguous()) {
    NoGradGuard no_grad;
    g = contiguous(g);
  }
  const std::vector<int64_t> idx = detail::checked_embedding_indices(
      op.name(), in[1], a.num_weights, fmt::format("the weight ([{}, D])", a.num_weights),
      kernel_call_site());
  const int64_t d = g.shape().back(), n = static_cast<int64_t>(idx.size());
  const int64_t pad = a.padding_idx.value_or(-1);
  zero_fill(out[0]);
  visit_dtype(g.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* pg = static_cast<const T*>(g.raw_data());
    T* po = static_cast<T*>(out[0].raw_data());
    // Threads split the columns; each column adds its rows in index order, so duplicates sum
    // in a fixed order whatever the thread count.
    parallel_for(0, d, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)),
                 [&](int64_t c0, int64_t c1) {
                   for (int64_t i = 0; i < n; ++i) {
                     if (idx[i] == pad) continue;
                     T* dst = po + idx[i] * d;
                     const T* src = pg + i * d;
                     for (int64_t c = c0; c < c1; ++c)
                       dst[c] = static_cast<T>(static_cast<C>(dst[c]) + static_cast<C>(src[c]));
                   }
                 });
  });
}

KILN_REGISTER_KERNEL("embedding", DeviceType::CPU, embedding_kernel);
KILN_REGISTER_KERNEL("embedding_backward", DeviceType::CPU, embedding_backward_kernel);

}  // namespace

}  // namespace kiln
