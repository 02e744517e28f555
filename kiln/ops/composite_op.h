#pragma once
// CompositeOp: an op that keeps its identity (name, attrs, infer, vjp) but computes its result with
// other public ops (Note [composite ops] in dispatch_mode.h).
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op.h"

namespace kiln {

class CompositeOp : public Op {
 public:
  // The result, computed with public kiln ops on real tensors. It must agree with infer's
  // metadata (shape, dtype, dense in the declared memory format); errors inside name the user's
  // line when the ops are given kernel_call_site().
  virtual std::vector<Tensor> decompose(const std::vector<Tensor>& inputs) const = 0;

  // Runs decompose inside a CompositeScope and hands its results out as the op's outputs.
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs,
                              const std::vector<TensorMeta>& metas) const override;
};

}  // namespace kiln
