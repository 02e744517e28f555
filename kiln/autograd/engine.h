#pragma once
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// Gradients of `outputs` (seeded by grad_outputs; a scalar output may omit its seed) with respect
// to `inputs`, returned instead of accumulated into .grad (as torch.autograd.grad). With
// create_graph the gradients carry history, so they can be differentiated again. An input the
// outputs do not depend on is an error unless allow_unused (then its gradient is undefined).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false,
                         const Loc& loc = Loc::current());

// Accumulates gradients of `outputs` into the .grad of every leaf that requires grad.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false,
              const Loc& loc = Loc::current());

namespace detail {
// Note [traced gradients]: while a tracer records (kiln/graph/tracer.h), the tape holds the
// trace's meta stand-ins, not the real tensors the code names: a parameter is a capture and the
// ops saw its stand-in. grad() asks this thread's hook for the tensor that stands for each of
// its inputs, so grad(loss, model.parameters()) inside a traced function differentiates with
// respect to the parameters as the graph sees them (a traced training step). backward() inside a
// trace accumulates into the stand-ins' .grad, which the real parameters do not see: use grad().
using GradInputHook = Tensor (*)(const Tensor&);
// Installs `hook` on this thread (nullptr: none); returns the one it replaces.
GradInputHook set_grad_input_hook(GradInputHook hook);
}  // namespace detail

}  // namespace kiln
