#pragma once
// The Module form of kiln::graph::function (Note [traced modules]).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/graph/function.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// Note [traced modules]
// ~~~~~~~~~~~~~~~~~~~~~
// nn::function(model, ...) is graph::function (Note [function cache]) over the model's call,
// model(inputs) (forward_many, then the forward hooks), as tf.function over a Keras model or
// torch.jit.trace over an nn.Module:
//   - the train/eval mode of the model and of every descendant is part of the cache key
//     (FunctionOptions::state_key): a model switched to eval after a training-mode trace
//     retraces, and says so ("retracing 'SmallCnn': state changed train -> eval");
//   - parameters and buffers are captures, referenced by identity (Note [tracer]): an optimizer
//     step or load_state_dict changes what the graph computes without a retrace, as in eager;
//     a training-mode graph updates the batch-norm running statistics in place;
//   - the name defaults to the model's type name.
// The shared_ptr form keeps the model alive; with the reference form the caller must.
graph::Function function(std::shared_ptr<Module> model, std::vector<graph::TensorSpec> signature,
                         graph::FunctionOptions options = {}, const Loc& loc = Loc::current());
graph::Function function(std::shared_ptr<Module> model, graph::FunctionOptions options = {},
                         const Loc& loc = Loc::current());
graph::Function function(Module& model, std::vector<graph::TensorSpec> signature,
                         graph::FunctionOptions options = {}, const Loc& loc = Loc::current());

// "train", "eval", or for a model in both modes "train (eval: bn1, layer1.0.bn2)" (the
// descendants whose mode differs from the model's own).
std::string mode_key(const Module& model);

// FunctionOptions::capture_name for graphs over `model`: the name of one of its parameters or
// buffers ("layer1.0.conv1.weight"), or "" for any other tensor. `model` must outlive it.
std::function<std::string(const Tensor&)> state_names(const Module& model);

}  // namespace kiln::nn
