#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kiln/core/rng.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;             // attention weights, after the feed-forward activation and
                                    // on both residual branches (PyTorch's four dropouts)
  std::string activation = "relu";  // "relu" or "gelu" (exact, erf-based)
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;   // pre-norm when true, post-norm (the original Transformer) when false
  Generator* gen = nullptr;  // for every dropout (default_generator() when null)
};

// As torch.nn.TransformerEncoderLayer (PyTorch 1.13's path when gradients are recorded), with its
// children and state_dict names: self_attn (MultiheadAttention with bias, in_proj_weight ...),
// linear1 [dim_feedforward, d_model], dropout, linear2 [d_model, dim_feedforward], norm1, norm2
// (LayerNorm), dropout1, dropout2.
//   norm_first = false: x = norm1(x + sa(x)); x = norm2(x + ff(x))
//   norm_first = true:  x = x + sa(norm1(x)); x = x + ff(norm2(x))
// with sa(x) = dropout1(self_attn(x, x, x, masks)) and ff(x) = dropout2(linear2(dropout(
// activation(linear1(x))))). src is [S, N, E] ([N, S, E] with batch_first) or unbatched [S, E];
// src_mask and src_key_padding_mask are MultiheadAttention's attn_mask and key_padding_mask.
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                          TransformerEncoderLayerOptions options = {},
                          const Loc& loc = Loc::current());
  // Every child's default initialization again (self_attn, linear1, linear2; norms to 1 / 0).
  void reset_parameters(Generator* gen = nullptr);

  Tensor forward(const Tensor& src, const Tensor& src_mask,
                 const Tensor& src_key_padding_mask = Tensor(), bool is_causal = false,
                 const Loc& loc = Loc::current());
  Tensor forward(const Tensor& src) override;

  int64_t d_model, nhead;
  TransformerEncoderLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  Tensor activate(const Tensor& x, const Loc& loc) const;
};

using EncoderLayerFactory = std::function<std::shared_ptr<TransformerEncoderLayer>()>;

// As torch.nn.TransformerEncoder: children layers (a ModuleList, "layers.0.self_attn...") and,
// when given, norm (applied after the last layer). PyTorch deep-copies ONE layer num_layers
// times, so its layers start with equal weights; kiln calls make_layer num_layers times, so each
// layer is initialized independently (load a state dict for PyTorch's exact weights). PyTorch's
// nested-tensor fast path (inference without gradients) is not reproduced: padded positions are
// computed like the rest instead of being zeroed.
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const EncoderLayerFactory& make_layer, int64_t num_layers,
                     ModulePtr norm = nullptr, const Loc& loc = Loc::current());

  Tensor forward(const Tensor& src, const Tensor& mask,
                 const Tensor& src_key_padding_mask = Tensor(), bool is_causal = false,
                 const Loc& loc = Loc::current());
  Tensor forward(const Tensor& src) override;

  std::shared_ptr<ModuleList> layers;
  ModulePtr norm;  // null when none
};

}  // namespace kiln::nn
