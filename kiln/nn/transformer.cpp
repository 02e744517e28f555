#include "kiln/nn/transformer.h"

#include <utility>

#include "kiln/ops/binary.h"
#include "kiln/ops/unary.h"

namespace kiln::nn {

namespace {
constexpr const char* kLayer = "TransformerEncoderLayer";
}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d, int64_t h,
                                                 TransformerEncoderLayerOptions opts,
                                                 const Loc& loc)
    : Module("TransformerEncoderLayer"), d_model(d), nhead(h), options(std::move(opts)) {
  if (options.activation != "relu" && options.activation != "gelu")
    fail(kLayer, loc, "expected activation \"relu\" or \"gelu\", but got \"{}\"",
         options.activation);
  if (options.dim_feedforward <= 0)
    fail(kLayer, loc, "expected dim_feedforward > 0, but got {}", options.dim_feedforward);
  const double p = options.dropout;
  // Registration order is PyTorch's (named_modules and state_dict list the same order).
  self_attn = register_module(
      "self_attn",
      std::make_shared<MultiheadAttention>(
          d, h, MhaOptions{.dropout = p, .batch_first = options.batch_first, .gen = options.gen},
          loc),
      loc);
  linear1 = register_module(
      "linear1",
      std::make_shared<Linear>(d, options.dim_feedforward, true, InitProfile::PyTorch, loc), loc);
  dropout = register_module("dropout", std::make_shared<Dropout>(p, options.gen, loc), loc);
  linear2 = register_module(
      "linear2",
      std::make_shared<Linear>(options.dim_feedforward, d, true, InitProfile::PyTorch, loc), loc);
  norm1 =
      register_module("norm1", std::make_shared<LayerNorm>(Shape{d}, options.layer_norm_eps), loc);
  norm2 =
      register_module("norm2", std::make_shared<LayerNorm>(Shape{d}, options.layer_norm_eps), loc);
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(p, options.gen, loc), loc);
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(p, options.gen, loc), loc);
}

void TransformerEncoderLayer::reset_parameters(Generator* gen) {
  self_attn->reset_parameters(gen);
  linear1->reset_parameters(gen);
  linear2->reset_parameters(gen);
  for (const auto& norm : {norm1, norm2}) {
    init::ones_(norm->weight);
    init::zeros_(norm->bias);
  }
}

Tensor TransformerEncoderLayer::activate(const Tensor& x, const Loc& loc) const {
  return options.activation == "gelu" ? gelu(x, "none", loc) : relu(x, loc);
}

Tensor TransformerEncoderLayer::forward(const Tensor& src) {
  return forward(src, Tensor());
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask,
                                        const Tensor& src_key_padding_mask, bool is_causal,
                                        const Loc& loc) {
  if (!src.defined() || (src.dim() != 2 && src.dim() != 3) || src.dim_size(-1) != d_model)
    fail(kLayer, loc, "expected src {} or unbatched [S, E] with E = d_model = {}, but got {}",
         options.batch_first ? "[N, S, E]" : "[S, N, E]", d_model,
         src.defined() ? src.describe() : "an undefined tensor");
  // self_attn takes masks, so it is called through its own forward (operator() takes one input);
  // the other children go through operator() so their forward hooks run, as in PyTorch.
  auto sa = [&](const Tensor& x) {
    Tensor y = self_attn
                   ->forward(x, x, x, src_key_padding_mask, /*need_weights=*/false, src_mask, true,
                             is_causal, loc)
                   .first;
    return (*dropout1)(y);
  };
  auto ff = [&](const Tensor& x) {
    Tensor y = (*linear2)((*dropout)(activate((*linear1)(x), loc)));
    return (*dropout2)(y);
  };
  Tensor x = src;
  if (options.norm_first) {
    x = add(x, sa((*norm1)(x)), loc);
    x = add(x, ff((*norm2)(x)), loc);
  } else {
    x = (*norm1)(add(x, sa(x), loc));
    x = (*norm2)(add(x, ff(x), loc));
  }
  return x;
}

TransformerEncoder::TransformerEncoder(const EncoderLayerFactory& make_layer, int64_t num_layers,
                                       ModulePtr norm_module, const Loc& loc)
    : Module("TransformerEncoder") {
  if (!make_layer)
    fail("TransformerEncoder", loc, "expected a layer factory, but got an empty one");
  if (num_layers <= 0)
    fail("TransformerEncoder", loc, "expected num_layers > 0, but got {}", num_layers);
  layers = register_module("layers", std::make_shared<ModuleList>(), loc);
  for (int64_t i = 0; i < num_layers; ++i) {
    auto layer = make_layer();
    if (!layer)
      fail("TransformerEncoder", loc,
           "expected the factory to return a layer, but layer {} is null", i);
    layers->push_back(layer, loc);
  }
  if (norm_module) norm = register_module("norm", std::move(norm_module), loc);
}

Tensor TransformerEncoder::forward(const Tensor& src) {
  return forward(src, Tensor());
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask,
                                   const Tensor& src_key_padding_mask, bool is_causal,
                                   const Loc& loc) {
  Tensor x = src;
  for (size_t i = 0; i < layers->size(); ++i) {
    auto* layer = dynamic_cast<TransformerEncoderLayer*>((*layers)[i].get());
    if (!layer)
      fail("TransformerEncoder", loc,
           "expected layers.{} to be a TransformerEncoderLayer, but got a {}", i,
           (*layers)[i]->type_name());
    x = layer->forward(x, mask, src_key_padding_mask, is_causal, loc);
  }
  return norm ? (*norm)(x) : x;
}

}  // namespace kiln::nn
