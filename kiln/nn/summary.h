#pragma once
#include <optional>
#include <string>

#include "kiln/nn/module.h"

namespace kiln::nn {

// A table like Keras' model.summary(): one row per call of a leaf module (a module without
// submodules) in execution order, with its dotted name, type, output shape and parameter count,
// then the totals (total / trainable / non-trainable parameters of the whole module).
//
// input_shape excludes the batch dim (as Keras' input_shape); the forward runs on a meta tensor
// of shape [1, input_shape...] and dtype `dtype`, so it computes shapes only and allocates no
// memory, and the batch dim prints as "None". For the duration of the call the module is put in
// eval mode and its parameters and buffers are pointed at meta storage; both are restored
// afterwards (also when forward throws), so the module is unchanged, which is why it may be
// given as const.
std::string summary(const Module& module, Shape input_shape, DType dtype = DType::Float32,
                    const Loc& loc = Loc::current());
// Mixed precision (Note [autocast]): the forward runs in an autocast region of `compute_dtype`
// (forced, so the table is the same on every CPU), the table gains a "Dtype" column with each
// layer's output dtype, and the totals say the compute and variable dtypes.
std::string summary(const Module& module, Shape input_shape, DType dtype,
                    std::optional<DType> compute_dtype, const Loc& loc = Loc::current());

}  // namespace kiln::nn
