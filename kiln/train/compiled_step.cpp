#include "kiln/train/compiled_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <optional>

#include "kiln/autograd/engine.h"
#include "kiln/core/allocator.h"
#include "kiln/core/grad_mode.h"
#include "kiln/nn/traced.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/optimizer_update.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/optim/grad_scaler.h"

namespace kiln::train {

namespace {

// One update the optimizer's step would dispatch (Note [updates in graphs]).
struct Update {
  kiln::detail::OptimizerUpdate kind;
  nlohmann::json attrs;
  std::vector<Tensor> tensors;  // param, grad (a stand-in), state...
};

class Collector final : public kiln::detail::UpdateSink {
 public:
  void take(kiln::detail::OptimizerUpdate kind, nlohmann::json attrs,
            const std::vector<Tensor>& tensors) override {
    updates.push_back({kind, std::move(attrs), tensors});
  }
  std::vector<Update> updates;
};

// What the graph's update nodes were traced for: the kinds, the attrs that are not hyper numbers,
// and the identity of every tensor written. A step whose updates differ (a state tensor replaced
// by load_state_dict, amsgrad switched on) traces again.
std::string signature_of(const std::vector<Update>& updates) {
  std::string sig;
  for (const Update& u : updates) {
    nlohmann::json fixed = nlohmann::json::object();
    for (const auto& [key, v] : u.attrs.items())
      if (!kiln::detail::is_update_hyper(key, v)) fixed[key] = v;
    sig += fmt::format("{}:{}:", static_cast<int>(u.kind), fixed.dump());
    for (const auto& [key, v] : u.attrs.items()) sig += key + ",";
    for (size_t i = 0; i < u.tensors.size(); ++i)
      if (i != 1) sig += fmt::format("{};", static_cast<const void*>(u.tensors[i].impl()));
    sig += "|";
  }
  return sig;
}

}  // namespace

struct CompiledStep::State {
  nn::Module* model;
  StepLossFn loss;
  optim::Optimizer* optimizer;
  CompiledStepOptions options;
  std::vector<Tensor> params;  // the ones that require grad, in model->parameters() order
  std::optional<graph::Function> fn;
  // This call's updates (read by the trace) and which param each one updates.
  std::vector<Update> updates;
  std::vector<size_t> update_param;
  std::string signature;  // of the updates the graph was traced with
  Shape hyper_shape;      // of the hyper input the function was made for
  int generation = 0;     // bumped when the signature changes: part of the cache key
  Loc call_loc;

  void report(const std::string& line) const {
    if (options.logger)
      options.logger(line);
    else
      std::cerr << line << "\n";
  }

  // in: data, target, hyper (with a scaler: the scale). Returns [loss, logits]; the updates are
  // nodes of the graph. With a scaler: [loss, logits, the scaled gradient of each param]
  // (Note [loss scaling in compiled steps]).
  std::vector<Tensor> step(const std::vector<Tensor>& in) const {
    Tensor logits, total;
    {
      // Note [autocast in compiled steps].
      std::optional<AutocastGuard> region;
      if (options.autocast_dtype) region.emplace(*options.autocast_dtype, options.autocast_options);
      logits = (*model)(in[0]);
      total = loss(logits, in[1]);
      const Tensor penalty = model->regularization_loss();
      if (penalty.defined()) total = add(total, penalty);
    }
    // GradScaler::scale's float32 product, with the scale a tensor.
    const Tensor scaled = options.grad_scaler ? mul(to_dtype(total, DType::Float32), in[2]) : total;
    std::vector<Tensor> grads = kiln::grad({scaled}, params, {}, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
    // A parameter the loss does not reach gets a zero gradient (eager leaves .grad empty and
    // skips it).
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined()) grads[i] = zeros_like(params[i]);
    if (options.grad_scaler) {
      std::vector<Tensor> out{total, logits};
      out.insert(out.end(), grads.begin(), grads.end());
      return out;
    }
    NoGradGuard no_grad;
    for (size_t r = 0; r < updates.size(); ++r) {
      std::vector<Tensor> tensors = updates[r].tensors;
      tensors[1] = grads[update_param[r]];
      kiln::detail::optimizer_update_from(updates[r].kind, updates[r].attrs, std::move(tensors),
                                          in[2], static_cast<int64_t>(r), call_loc);
    }
    return {total, logits};
  }

  // Runs the optimizer's step with every parameter's own memory standing in for its gradient
  // and takes the updates it would dispatch: the optimizer advances its step counts and creates
  // its state exactly as an eager step does, and nothing is computed.
  void collect_updates(const Loc& loc) {
    for (Tensor p : params) p.set_grad(p.detach());
    Collector collector;
    {
      kiln::detail::UpdateSinkScope scope(&collector);
      try {
        optimizer->step(loc);
      } catch (...) {
        for (Tensor p : params) p.set_grad(Tensor());
        throw;
      }
    }
    for (Tensor p : params) p.set_grad(Tensor());
    updates = std::move(collector.updates);
    update_param.clear();
    for (const Update& u : updates) {
      auto it = std::find_if(params.begin(), params.end(),
                             [&](const Tensor& p) { return p.is_same(u.tensors[0]); });
      if (it == params.end())
        throw InternalError(
            "kiln internal error: compile_train_step: the optimizer updated a tensor that is not "
            "a parameter of the model requiring grad");
      update_param.push_back(static_cast<size_t>(it - params.begin()));
    }
    const std::string sig = signature_of(updates);
    if (sig != signature) {
      signature = sig;
      ++generation;
    }
  }

  // The numbers of every update, one row each (Note [updates in graphs]).
  Tensor hyper_matrix() const {
    std::vector<std::vector<double>> rows;
    size_t columns = 1;
    for (const Update& u : updates) {
      rows.push_back(kiln::detail::update_hyper_values(u.attrs));
      columns = std::max(columns, rows.back().size());
    }
    Tensor h = zeros(
        {static_cast<int64_t>(std::max<size_t>(rows.size(), 1)), static_cast<int64_t>(columns)},
        {DType::Float64});
    double* d = static_cast<double*>(h.raw_data());
    for (size_t r = 0; r < rows.size(); ++r)
      std::copy(rows[r].begin(), rows[r].end(), d + r * columns);
    return h;
  }

  graph::FunctionOptions function_options() const {
    graph::FunctionOptions o;
    o.name = options.name;
    o.passes = options.passes;
    o.record_tape = false;
    o.plan_memory = options.plan_memory;
    o.logger = options.logger;
    nn::Module* m = model;
    const int* gen = &generation;
    const std::string precision =
        options.autocast_dtype ? dtype_name(*options.autocast_dtype) : "float32";
    const char* scaling = options.grad_scaler ? ", loss-scaled" : "";
    o.state_key = [m, gen, precision, scaling] {
      return fmt::format("{}, optimizer tensors #{}, {}{}", nn::mode_key(*m), *gen, precision,
                         scaling);
    };
    o.capture_name = nn::state_names(*m);
    return o;
  }

  // Compiles at the first call, with the batch dim (dim 0 of data and target) symbolic.
  void compile(const Tensor& data, const Tensor& target, const Tensor& hyper, const Loc& loc) {
    auto spec = [](const Tensor& t, const char* name, bool batch) {
      graph::SymShape s = graph::static_shape(t.shape());
      if (!s.empty() && batch) s[0].symbol = "batch";
      return graph::TensorSpec(s, t.dtype(), name);
    };
    auto body = [this](const std::vector<Tensor>& in) { return step(in); };
    try {
      fn.emplace(graph::function(body,
                                 {spec(data, "data", true), spec(target, "target", true),
                                  spec(hyper, options.grad_scaler ? "scale" : "hyper", false)},
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
  if (options.autocast_dtype && *options.autocast_dtype == DType::Float16 &&
      options.grad_scaler == nullptr)
    throw Error(
        "[compile_train_step] autocast in float16 needs loss scaling: pass "
        "CompiledStepOptions::grad_scaler (an optim::GradScaler), as an eager float16 step "
        "would use one");
  if (options.autocast_dtype && *options.autocast_dtype != DType::Float16 &&
      *options.autocast_dtype != DType::BFloat16)
    throw Error(std::string("[compile_train_step] expected autocast in bfloat16 or float16, but "
                            "got ") +
                dtype_name(*options.autocast_dtype));
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
  // Last step's gradients (a user's or an eager step's) would be stepped on again: drop them.
  st.optimizer->zero_grad(/*set_to_none=*/true);
  st.call_loc = loc;
  if (optim::GradScaler* scaler = st.options.grad_scaler) {
    // Note [loss scaling in compiled steps].
    const Tensor scale = full({}, scaler->get_scale(), {DType::Float32});
    if (!st.fn) {
      st.compile(data, target, scale, loc);
      st.hyper_shape = scale.shape();
    }
    const std::vector<Tensor> out = (*st.fn)({data, target, scale}, loc);
    for (size_t i = 0; i < st.params.size(); ++i) st.params[i].set_grad(out[2 + i]);
    scaler->step(*st.optimizer, loc);
    scaler->update(loc);
    return {out[0], out[1]};
  }
  st.collect_updates(loc);
  const Tensor hyper = st.hyper_matrix();
  // Another number of updates or of numbers per update: another signature.
  if (!st.fn || hyper.shape() != st.hyper_shape) {
    st.compile(data, target, hyper, loc);
    st.hyper_shape = hyper.shape();
  }
  const std::vector<Tensor> out = (*st.fn)({data, target, hyper}, loc);
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
