#include "kiln/nn/quantized.h"

#include <cmath>
#include <map>
#include <optional>

#include "kiln/core/error.h"
#include "kiln/nn/layers.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/quantize.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::nn {

std::shared_ptr<LayerQuantization>* quantization_slot(Module& layer) {
  if (auto* conv = dynamic_cast<Conv2d*>(&layer)) return &conv->quantization;
  if (auto* linear = dynamic_cast<Linear*>(&layer)) return &linear->quantization;
  return nullptr;
}

LayerQuantization* layer_quantization(Module& layer) {
  std::shared_ptr<LayerQuantization>* slot = quantization_slot(layer);
  return slot != nullptr ? slot->get() : nullptr;
}

LayerQuantization& make_quantized(Module& layer, DType input_dtype, double input_scale,
                                  bool folded_batch_norm, const Loc& loc) {
  std::shared_ptr<LayerQuantization>* slot = quantization_slot(layer);
  if (slot == nullptr)
    fail("quantize", loc, "expected a Conv2d or Linear layer, but got a {}", layer.type_name());
  if (*slot && (*slot)->active)
    fail("quantize", loc, "the {} is already quantized; quantize the float model instead",
         layer.type_name());
  if (input_dtype != DType::UInt8 && input_dtype != DType::Int8)
    fail("quantize", loc, "expected an input dtype uint8 or int8, but got {}",
         dtype_name(input_dtype));
  if (!(std::isfinite(input_scale) && input_scale > 0.0))
    fail("quantize", loc, "expected a finite input scale > 0, but got {}", input_scale);
  Tensor* weight = nullptr;
  if (auto* conv = dynamic_cast<Conv2d*>(&layer)) weight = &conv->weight;
  if (auto* linear = dynamic_cast<Linear*>(&layer)) weight = &linear->weight;
  if (folded_batch_norm && dynamic_cast<Conv2d*>(&layer) == nullptr)
    fail("quantize", loc, "only a Conv2d can have a batch norm folded in, not a {}",
         layer.type_name());
  const int64_t out = weight->dim_size(0);
  auto q = std::make_shared<LayerQuantization>();
  q->input_dtype = input_dtype;
  q->input_scale = input_scale;
  q->folded_batch_norm = folded_batch_norm;
  q->weight_q = layer.register_buffer("weight_q", zeros(weight->shape(), {.dtype = DType::Int8}));
  q->bias_q = layer.register_buffer("bias_q", zeros({out}, {.dtype = DType::Int32}));
  q->out_scale = layer.register_buffer("out_scale", zeros({out}, {.dtype = DType::Float32}));
  q->active = true;
  *slot = std::move(q);
  return **slot;
}

namespace {

// The name in `model` of the batch norm folded into q's convolution: recorded, or found from the
// module conv_bn calibrated with; "" when neither.
std::string batch_norm_name(const Module& model, const LayerQuantization& q) {
  if (!q.batch_norm.empty() || q.calibrated_with == nullptr) return q.batch_norm;
  for (const auto& [name, m] : model.named_modules())
    if (m == q.calibrated_with) return name;
  return "";
}

}  // namespace

nlohmann::json quantization_spec(const Module& model) {
  nlohmann::json layers = nlohmann::json::object();
  bool stripped = false;
  for (const auto& [name, m] : model.named_modules()) {
    const LayerQuantization* q = layer_quantization(*m);
    if (q == nullptr || !q->active) continue;
    nlohmann::json entry = {{"type", m->type_name()},
                            {"input_dtype", dtype_name(q->input_dtype)},
                            {"input_scale", q->input_scale},
                            {"folded_batch_norm", q->folded_batch_norm}};
    if (q->folded_batch_norm) {
      const std::string bn = batch_norm_name(model, *q);
      if (!bn.empty()) entry["batch_norm"] = bn;
    }
    layers[name] = std::move(entry);
    stripped = stripped || q->float_stripped;
  }
  return {{"scheme", "int8-symmetric"}, {"float_stripped", stripped}, {"layers", layers}};
}

std::vector<std::string> strip_float(Module& model, const Loc& loc) {
  std::map<std::string, Module*> modules;
  for (const auto& [name, m] : model.named_modules()) modules[name] = m;
  // Checked first, so that a refusal leaves the model as it was.
  std::vector<std::pair<std::string, Module*>> targets;  // (prefix, module) to empty
  for (const auto& [name, m] : modules) {
    LayerQuantization* q = layer_quantization(*m);
    if (q == nullptr || !q->active) continue;
    targets.emplace_back(name, m);
    if (!q->folded_batch_norm) continue;
    const std::string bn = batch_norm_name(model, *q);
    auto it = modules.find(bn);
    if (bn.empty() || it == modules.end() || dynamic_cast<BatchNorm*>(it->second) == nullptr)
      fail("strip_float", loc,
           "the convolution \"{}\" has a batch norm folded in that is not known by name; "
           "quantize with train::quantize (which records it) before stripping",
           name);
    q->batch_norm = bn;
    targets.emplace_back(bn, it->second);
  }
  std::vector<std::string> stripped;
  const auto empty_out = [&](const std::string& prefix, const std::string& local, const Tensor& t) {
    if (!t.defined() || (t.dim() == 1 && t.dim_size(0) == 0)) return;
    replace_tensor_data(t, empty({0}, {.dtype = t.dtype()}));
    stripped.push_back(prefix.empty() ? local : prefix + "." + local);
  };
  for (const auto& [prefix, m] : targets) {
    if (auto* conv = dynamic_cast<Conv2d*>(m)) {
      empty_out(prefix, "weight", conv->weight);
      empty_out(prefix, "bias", conv->bias);
      conv->quantization->float_stripped = true;
    } else if (auto* linear = dynamic_cast<Linear*>(m)) {
      empty_out(prefix, "weight", linear->weight);
      empty_out(prefix, "bias", linear->bias);
      linear->quantization->float_stripped = true;
    } else if (auto* bn = dynamic_cast<BatchNorm*>(m)) {
      empty_out(prefix, "weight", bn->weight);
      empty_out(prefix, "bias", bn->bias);
      empty_out(prefix, "running_mean", bn->running_mean);
      empty_out(prefix, "running_var", bn->running_var);
    }
  }
  return stripped;
}

void prepare_quantized(Module& model, const nlohmann::json& spec, const Loc& loc) {
  if (!spec.is_object() || spec.value("scheme", "") != "int8-symmetric" ||
      !spec.contains("layers") || !spec["layers"].is_object())
    fail("prepare_quantized", loc,
         "expected a quantization spec {{\"scheme\": \"int8-symmetric\", \"layers\": {{...}}}}, "
         "but got {}",
         spec.dump().substr(0, 200));
  std::map<std::string, Module*> modules;
  for (const auto& [name, m] : model.named_modules()) modules[name] = m;
  for (const auto& [name, entry] : spec["layers"].items()) {
    auto it = modules.find(name);
    if (it == modules.end())
      fail("prepare_quantized", loc, "the spec quantizes a layer \"{}\" that the model lacks",
           name);
    try {
      const std::optional<DType> dt = dtype_from_name(entry.at("input_dtype").get<std::string>());
      if (!dt) throw Error("unknown input_dtype " + entry.at("input_dtype").dump());
      LayerQuantization& q = make_quantized(*it->second, *dt, entry.at("input_scale").get<double>(),
                                            entry.at("folded_batch_norm").get<bool>(), loc);
      if (entry.contains("batch_norm")) q.batch_norm = entry.at("batch_norm").get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      fail("prepare_quantized", loc, "malformed entry for layer \"{}\": {}", name, e.what());
    } catch (const Error& e) {
      fail("prepare_quantized", loc, "layer \"{}\": {}", name, e.what());
    }
  }
  // Note [stripped float weights]: the same tensors emptied, so that the stripped file fits.
  const nlohmann::json stripped = spec.value("float_stripped", nlohmann::json(false));
  if (!stripped.is_boolean())
    fail("prepare_quantized", loc, "expected \"float_stripped\" to be true or false, but got {}",
         stripped.dump());
  if (stripped.get<bool>()) strip_float(model, loc);
}

Tensor quantized_forward(Module& layer, const LayerQuantization& q, const Tensor& x, bool relu,
                         const Loc& loc) {
  const Tensor xq = quantize_per_tensor(x, q.input_scale, q.input_dtype, loc);
  if (auto* conv = dynamic_cast<Conv2d*>(&layer)) {
    if (x.dim() == 3)  // unbatched (C, H, W)
      return squeeze(quantized_conv2d(unsqueeze(xq, 0), q.weight_q, q.bias_q, q.out_scale, relu,
                                      conv->options, loc),
                     0);
    return quantized_conv2d(xq, q.weight_q, q.bias_q, q.out_scale, relu, conv->options, loc);
  }
  return quantized_linear(xq, q.weight_q, q.bias_q, q.out_scale, relu, loc);
}

}  // namespace kiln::nn
