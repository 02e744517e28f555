#pragma once
#include "kiln/core/tensor.h"

namespace kiln {

// The assignment ops behind Tensor::copy_, fill_, zero_ and the in-place arithmetic ops (Note
// [effects] in op.h): they write into `self` through the dispatcher, so every mode sees the write.
// They do no autograd bookkeeping and bump no version; Tensor's in-place methods do both, and are
// what user code calls.
void assign(const Tensor& self, const Tensor& src, const Loc& loc = Loc::current());
void assign_fill(const Tensor& self, double value, const Loc& loc = Loc::current());

}  // namespace kiln
