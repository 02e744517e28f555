#include "kiln/nn/traced.h"

#include <fmt/format.h>

namespace kiln::nn {

std::string mode_key(const Module& model) {
  const bool training = model.is_training();
  std::string odd;
  for (const auto& [name, m] : model.named_modules())
    if (m->is_training() != training) odd += (odd.empty() ? "" : ", ") + name;
  std::string key = training ? "train" : "eval";
  if (!odd.empty()) key += fmt::format(" ({}: {})", training ? "eval" : "train", odd);
  return key;
}

std::function<std::string(const Tensor&)> state_names(const Module& model) {
  return [&model](const Tensor& t) {
    for (const StateDict& named : {model.named_parameters(), model.named_buffers()})
      for (const auto& [name, tensor] : named)
        if (tensor.is_same(t)) return name;
    return std::string();
  };
}

namespace {

// The options for `model`: its mode in the key, its type name as the default name.
graph::FunctionOptions module_options(const Module& model, graph::FunctionOptions options) {
  if (options.name == graph::FunctionOptions{}.name) options.name = model.type_name();
  if (!options.capture_name) options.capture_name = state_names(model);
  auto user_key = std::move(options.state_key);
  options.state_key = [&model, user_key] {
    std::string key = mode_key(model);
    if (user_key) key += ", " + user_key();
    return key;
  };
  return options;
}

// model(inputs), keeping `owner` (the model, or nothing) alive as long as the function.
graph::Function::Fn call_of(Module& model, std::shared_ptr<Module> owner) {
  return [&model, owner](const std::vector<Tensor>& inputs) { return model(inputs); };
}

Module& checked(const std::shared_ptr<Module>& model, const Loc& loc) {
  if (!model) fail("nn::function", loc, "expected a model, but got a null shared_ptr");
  return *model;
}

}  // namespace

graph::Function function(std::shared_ptr<Module> model, std::vector<graph::TensorSpec> signature,
                         graph::FunctionOptions options, const Loc& loc) {
  Module& m = checked(model, loc);
  return graph::function(call_of(m, model), std::move(signature),
                         module_options(m, std::move(options)), loc);
}

graph::Function function(std::shared_ptr<Module> model, graph::FunctionOptions options,
                         const Loc& loc) {
  Module& m = checked(model, loc);
  return graph::function(call_of(m, model), module_options(m, std::move(options)), loc);
}

graph::Function function(Module& model, std::vector<graph::TensorSpec> signature,
                         graph::FunctionOptions options, const Loc& loc) {
  return graph::function(call_of(model, nullptr), std::move(signature),
                         module_options(model, std::move(options)), loc);
}

}  // namespace kiln::nn
