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

}  // namespace kiln
