#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "kiln/core/rng.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct MhaOptions {
  double dropout = 0.0;  // on the attention weights, in training mode only
  bool bias = true;      // in_proj_bias and out_proj.bias
  bool batch_first = false;
  std::optional<int64_t> kdim = std::nullopt;  // key features; embed_dim when unset
  std::optional<int64_t> vdim = std::nullopt;  // value features; embed_dim when unset
  Generator* gen = nullptr;  // for the attention dropout (default_generator() when null)
};

// Note [multi-head attention]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// As torch.nn.MultiheadAttention (PyTorch 1.13's slow path, which is also what it runs whenever
// gradients are recorded), composed of kiln's differentiable ops so that autograd, gradcheck and
// higher-order gradients work unchanged.
//
// Parameters carry PyTorch's state_dict names, so a torch state dict loads key for key:
//   kdim == vdim == embed_dim: in_proj_weight [3E, E] (rows: q, k, v)
//   otherwise:                 q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight
//                              [E, vdim]
//   bias:                      in_proj_bias [3E], out_proj.bias [E]
//   always:                    out_proj.weight [E, E] (out_proj is a Linear child)
// Initialization as PyTorch: out_proj gets Linear's default (kaiming_uniform_(a = sqrt(5))), then
// xavier_uniform_ on in_proj_weight (or each of q/k/v_proj_weight), and both biases are zeroed.
// add_bias_kv and add_zero_attn are not supported.
//
// Shapes (E = embed_dim, L = target length, S = source length, N = batch, H = num_heads):
//   query [L, N, E], key [S, N, kdim], value [S, N, vdim]; [N, L, E] etc. with batch_first;
//   unbatched [L, E], [S, kdim], [S, vdim] (batch_first is ignored, as in PyTorch).
//   key_padding_mask [N, S] ([S] unbatched): bool, true = the key is ignored; or floating, added
//     to the scores.
//   attn_mask [L, S] or [N * H, L, S] ([H, L, S] unbatched): bool, true = not allowed to attend;
//     or floating, added to the scores.
//   is_causal: masks key j > query i (top-left aligned, PyTorch 2's causal mask), combined with
//     attn_mask when both are given. PyTorch 2 treats is_causal as a hint that attn_mask already
//     is the causal mask; for such a mask the result is the same.
// Returns (output, weights): output shaped like query but with E features; weights (after the
// attention dropout, as PyTorch 1.13 returns them) [N, L, S] averaged over heads, or
// [N, H, L, S] with average_attn_weights = false ([L, S] / [H, L, S] unbatched), undefined
// when need_weights is false. A query row whose keys are all masked gets NaN, as in PyTorch.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MhaOptions options = {},
                     const Loc& loc = Loc::current());
  // out_proj's Linear init, then xavier_uniform_ on the input projections, zero biases.
  void reset_parameters(Generator* gen = nullptr);

  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = Tensor(),
                                    bool need_weights = true, const Tensor& attn_mask = Tensor(),
                                    bool average_attn_weights = true, bool is_causal = false,
                                    const Loc& loc = Loc::current());
  // Self-attention without masks: forward(x, x, x).first.
  Tensor forward(const Tensor& input) override;

  int64_t embed_dim, num_heads, head_dim, kdim, vdim;
  MhaOptions options;
  // Defined as the constructor's arguments select (see the note above).
  Tensor in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;

 private:
  // xavier_uniform_ on the input projection weights, zero biases.
  void reset_in_proj(Generator* gen);
};

}  // namespace kiln::nn
