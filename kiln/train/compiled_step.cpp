#include "kiln/train/compiled_step.h"

#include <fmt/format.h>

#include <iostream>
#include <optional>

#include "kiln/autograd/engine.h"
#include "kiln/core/allocator.h"
#include "kiln/core/grad_mode.h"
#include "kiln/nn/traced.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"

namespace kiln::train {

struct CompiledStep::State {
  nn::Module* model;
  StepLossFn loss;
  optim::Optimizer* optimizer;
  CompiledStepOptions options;
  std::vector<Tensor> params;  // the ones that require grad, in model->parameters() order
  std::optional<graph::Function> fn;

  void report(const std::string& line) const {
    if (options.logger)
      options.logger(line);
    else
      std::cerr << line << "\n";
  }

  // [loss, logits, grad of each param]
  std::vector<Tensor> step(const std::vector<Tensor>& in) const {
    const Tensor logits = (*model)(in[0]);
    Tensor total = loss(logits, in[1]);
    const Tensor penalty = model->regularization_loss();
    if (penalty.defined()) total = add(total, penalty);
    std::vector<Tensor> out = kiln::grad({total}, params, {}, /*retain_graph=*/false,
                                         /*create_graph=*/false, /*allow_unused=*/true);
    // A parameter the loss does not reach gets a zero gradient (eager leaves .grad empty; the
    // graph's outputs must be tensors).
    for (size_t i = 0; i < out.size(); ++i)
      if (!out[i].defined()) out[i] = zeros_like(params[i]);
    out.insert(out.begin(), {total, logits});
    return out;
  }

  graph::FunctionOptions function_options() const {
    graph::FunctionOptions o;
    o.name = options.name;
    o.passes = options.passes;
    o.record_tape = false;
    o.plan_memory = options.plan_memory;
    o.logger = options.logger;
    nn::Module* m = model;
    o.state_key = [m] { return nn::mode_key(*m); };
    o.capture_name = [m](const Tensor& t) {
      for (const nn::StateDict& named : {m->named_parameters(), m->named_buffers()})
        for (const auto& [name, tensor] : named)
          if (tensor.is_same(t)) return name;
      return std::string();
    };
    return o;
  }

  // Compiles at the first call, with the batch dim (dim 0 of data and target) symbolic.
  void compile(const Tensor& data, const Tensor& target, const Loc& loc) {
    auto spec = [](const Tensor& t, const char* name) {
      graph::SymShape s = graph::static_shape(t.shape());
      if (!s.empty()) s[0].symbol = "batch";
      return graph::TensorSpec(s, t.dtype(), name);
    };
    auto body = [this](const std::vector<Tensor>& in) { return step(in); };
    try {
      fn.emplace(graph::function(body, {spec(data, "data"), spec(target, "target")},
                                 function_options(), loc));
    } catch (const OutOfMemoryError&) {
      throw;
    } catch (const Error& e) {
      report(
          fmt::format("compile_train_step '{}': no symbolic batch ({}); tracing per batch "
                      "shape instead",
                      options.name, e.what()));
      fn.emplace(graph::function(body, function_options(), loc));
    }
  }
};

CompiledStep::CompiledStep(nn::Module& model, StepLossFn loss, optim::Optimizer& optimizer,
                           CompiledStepOptions options)
    : state_(std::make_shared<State>()) {
  if (!loss) throw Error("[compile_train_step] expected a loss function, but got an empty one");
  state_->model = &model;
  state_->loss = std::move(loss);
  state_->optimizer = &optimizer;
  state_->options = std::move(options);
  for (const Tensor& p : model.parameters())
    if (p.requires_grad()) state_->params.push_back(p);
}

CompiledStep::Result CompiledStep::operator()(const Tensor& data, const Tensor& target,
                                              const Loc& loc) {
  State& st = *state_;
  if (!GradMode::is_enabled())
    fail("compile_train_step", loc,
         "a training step computes gradients, but grad mode is off (NoGradGuard)");
  if (!st.fn) st.compile(data, target, loc);
  // The previous step's gradients go first, so that two sets are never alive at once.
  st.optimizer->zero_grad(/*set_to_none=*/true);
  const std::vector<Tensor> out = (*st.fn)({data, target}, loc);
  for (size_t i = 0; i < st.params.size(); ++i) {
    Tensor p = st.params[i];
    p.set_grad(out[i + 2]);
  }
  st.optimizer->step(loc);
  return {out[0], out[1]};
}

const graph::Function* CompiledStep::function() const {
  return state_->fn ? &*state_->fn : nullptr;
}

CompiledStep compile_train_step(nn::Module& model, StepLossFn loss, optim::Optimizer& optimizer,
                                CompiledStepOptions options) {
  return CompiledStep(model, std::move(loss), optimizer, std::move(options));
}

}  // namespace kiln::train
