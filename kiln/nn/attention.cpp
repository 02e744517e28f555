#include "kiln/nn/attention.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/ops/binary.h"
#include "kiln/ops/compare.h"
#include "kiln/ops/dropout.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/softmax.h"

namespace kiln::nn {

namespace {

constexpr const char* kLayer = "MultiheadAttention";

Tensor rows(const Tensor& t, int64_t index, int64_t size, const Loc& loc) {
  return t.defined() ? narrow(t, 0, index * size, size, loc) : Tensor();
}

bool is_mask_dtype(DType dt) {
  return dt == DType::Bool || is_floating(dt);
}

// Applies a bool (true = masked) or additive floating mask that broadcasts to scores.
Tensor apply_mask(const Tensor& scores, const Tensor& mask, const Loc& loc) {
  if (mask.dtype() == DType::Bool)
    return masked_fill(scores, mask, -std::numeric_limits<double>::infinity(), loc);
  return add(scores, mask, loc);
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, MhaOptions opts, const Loc& loc)
    : Module("MultiheadAttention"),
      embed_dim(e),
      num_heads(h),
      head_dim(0),
      kdim(opts.kdim.value_or(e)),
      vdim(opts.vdim.value_or(e)),
      options(opts) {
  if (e <= 0) fail(kLayer, loc, "expected embed_dim > 0, but got {}", e);
  if (h <= 0) fail(kLayer, loc, "expected num_heads > 0, but got {}", h);
  if (e % h != 0)
    fail(kLayer, loc,
         "expected embed_dim divisible by num_heads, but got embed_dim {} and {} heads", e, h);
  if (kdim <= 0 || vdim <= 0)
    fail(kLayer, loc, "expected kdim > 0 and vdim > 0, but got kdim {} and vdim {}", kdim, vdim);
  if (!(opts.dropout >= 0.0 && opts.dropout <= 1.0))
    fail(kLayer, loc, "expected dropout in [0, 1], but got {}", opts.dropout);
  head_dim = e / h;
  if (kdim == e && vdim == e) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * e, e}), true, loc);
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({e, e}), true, loc);
    k_proj_weight = register_parameter("k_proj_weight", empty({e, kdim}), true, loc);
    v_proj_weight = register_parameter("v_proj_weight", empty({e, vdim}), true, loc);
  }
  if (opts.bias) in_proj_bias = register_parameter("in_proj_bias", empty({3 * e}), true, loc);
  // Linear's constructor draws out_proj first, then the input projections: PyTorch's order.
  out_proj = register_module(
      "out_proj", std::make_shared<Linear>(e, e, opts.bias, InitProfile::PyTorch, loc), loc);
  reset_in_proj(nullptr);
}

void MultiheadAttention::reset_in_proj(Generator* gen) {
  if (in_proj_weight.defined()) {
    init::xavier_uniform_(in_proj_weight, 1.0, gen);
  } else {
    init::xavier_uniform_(q_proj_weight, 1.0, gen);
    init::xavier_uniform_(k_proj_weight, 1.0, gen);
    init::xavier_uniform_(v_proj_weight, 1.0, gen);
  }
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

void MultiheadAttention::reset_parameters(Generator* gen) {
  out_proj->reset_parameters(gen);
  reset_in_proj(gen);
}

Tensor MultiheadAttention::forward(const Tensor& input) {
  return forward(input, input, input, Tensor(), /*need_weights=*/false).first;
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                                      const Tensor& value,
                                                      const Tensor& key_padding_mask,
                                                      bool need_weights, const Tensor& attn_mask,
                                                      bool average_attn_weights, bool is_causal,
                                                      const Loc& loc) {
  if (!query.defined() || !key.defined() || !value.defined())
    fail(kLayer, loc, "expected defined query, key and value, but got an undefined tensor");
  const char* layout = options.batch_first ? "[N, L, E]" : "[L, N, E]";
  auto operands = [&] {
    return fmt::format("query {}, key {}, value {}", query.describe(), key.describe(),
                       value.describe());
  };
  if (query.dim() != 2 && query.dim() != 3)
    fail(kLayer, loc, "expected query of rank 3 ({}) or 2 (unbatched [L, E]), but got {}", layout,
         query.describe());
  if (key.dim() != query.dim() || value.dim() != query.dim())
    fail(kLayer, loc, "expected key and value of query's rank {}, but got {}", query.dim(),
         operands());
  const DType dtype = out_proj->weight.dtype();
  if (query.dtype() != dtype || key.dtype() != dtype || value.dtype() != dtype)
    fail(kLayer, loc, "expected query, key and value of the parameters' dtype {}, but got {}",
         dtype_name(dtype), operands());

  // Everything below works on [N, T, features].
  const bool batched = query.dim() == 3;
  auto to_batch_major = [&](const Tensor& x) {
    if (!batched) return unsqueeze(x, 0, loc);
    return options.batch_first ? x : transpose(x, 0, 1, loc);
  };
  Tensor q = to_batch_major(query), k = to_batch_major(key), v = to_batch_major(value);
  const int64_t n = q.dim_size(0), l = q.dim_size(1), s = k.dim_size(1);
  if (q.dim_size(2) != embed_dim || k.dim_size(2) != kdim || v.dim_size(2) != vdim ||
      k.dim_size(0) != n || v.dim_size(0) != n || v.dim_size(1) != s)
    fail(kLayer, loc,
         "expected query {}, key and value with one batch size and source length and {}, {} and "
         "{} features (embed_dim, kdim, vdim){}, but got {}",
         batched ? layout : "[L, E]", embed_dim, kdim, vdim,
         batched && options.batch_first ? " (batch_first)" : "", operands());

  // Masks as tensors that broadcast to the scores [N, H, L, S].
  std::vector<Tensor> masks;
  if (key_padding_mask.defined()) {
    Shape want = batched ? Shape{n, s} : Shape{s};
    if (key_padding_mask.shape() != want || !is_mask_dtype(key_padding_mask.dtype()) ||
        (key_padding_mask.dtype() != DType::Bool && key_padding_mask.dtype() != dtype))
      fail(kLayer, loc,
           "expected key_padding_mask {} = {} (bool, or {} to add), but got {} (with {})",
           batched ? "[N, S]" : "[S]", shape_str(want), dtype_name(dtype),
           key_padding_mask.describe(), operands());
    // Size-free shape ops, so a trace serves every batch (Note [size-free shape attrs]).
    masks.push_back(batched ? unsqueeze(unsqueeze(key_padding_mask, 1, loc), 1, loc)
                            : reshape(key_padding_mask, {1, 1, 1, -1}, loc));
  }
  if (attn_mask.defined()) {
    Shape want2 = {l, s}, want3 = {n * num_heads, l, s};
    bool ok_shape = attn_mask.shape() == want2 || attn_mask.shape() == want3;
    if (!ok_shape || !is_mask_dtype(attn_mask.dtype()) ||
        (attn_mask.dtype() != DType::Bool && attn_mask.dtype() != dtype))
      fail(kLayer, loc,
           "expected attn_mask [L, S] = {} or [{}, L, S] = {} (bool, or {} to add), but got {} "
           "(with {})",
           shape_str(want2), batched ? "N * num_heads" : "num_heads", shape_str(want3),
           dtype_name(dtype), attn_mask.describe(), operands());
    masks.push_back(attn_mask.dim() == 3 ? unflatten(attn_mask, 0, {-1, num_heads}, loc)
                                         : attn_mask);
  }
  if (is_causal) {
    // Key j is hidden from query i when j > i.
    const TensorOptions on_device{DType::Int64, query.device()};  // meta too (summary)
    // The positions as sizes, so a trace keeps them symbolic (Note [size lists]).
    Tensor key_pos = reshape(arange(k.size(1), on_device, loc), {1, -1}, loc);
    Tensor query_pos = reshape(arange(q.size(1), on_device, loc), {-1, 1}, loc);
    masks.push_back(gt(key_pos, query_pos, loc));
  }

  // Projections, split into heads: [N, H, T, D].
  const int64_t e = embed_dim;
  auto heads = [&](const Tensor& x, const Tensor& w, const Tensor& b) {
    return transpose(unflatten(linear(x, w, b, loc), -1, {num_heads, head_dim}, loc), 1, 2, loc);
  };
  Tensor qh = heads(q, in_proj_weight.defined() ? rows(in_proj_weight, 0, e, loc) : q_proj_weight,
                    rows(in_proj_bias, 0, e, loc));
  Tensor kh = heads(k, in_proj_weight.defined() ? rows(in_proj_weight, 1, e, loc) : k_proj_weight,
                    rows(in_proj_bias, 1, e, loc));
  Tensor vh = heads(v, in_proj_weight.defined() ? rows(in_proj_weight, 2, e, loc) : v_proj_weight,
                    rows(in_proj_bias, 2, e, loc));

  // PyTorch scales q before the product (same rounding as torch for float32).
  Tensor scores =
      matmul(div(qh, std::sqrt(static_cast<double>(head_dim)), loc), transpose(kh, 2, 3, loc), loc);
  for (const Tensor& m : masks) scores = apply_mask(scores, m, loc);
  Tensor attn = softmax(scores, -1, loc);
  if (is_training() && options.dropout > 0.0)
    attn = dropout(attn, options.dropout, true, options.gen, loc);

  Tensor context = flatten(transpose(matmul(attn, vh, loc), 1, 2, loc), 2, 3, loc);
  Tensor out = linear(context, out_proj->weight, out_proj->bias, loc);
  if (!batched)
    out = squeeze(out, 0, loc);
  else if (!options.batch_first)
    out = transpose(out, 0, 1, loc);

  Tensor weights;
  if (need_weights) {
    // sum / H rather than mean: PyTorch's exact expression.
    weights = average_attn_weights
                  ? div(sum(attn, {1}, false, loc), static_cast<double>(num_heads), loc)
                  : attn;
    if (!batched) weights = squeeze(weights, 0, loc);
  }
  return {out, weights};
}

}  // namespace kiln::nn
