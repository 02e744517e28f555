#pragma once
// fused_elementwise: a chain of unary and binary elementwise ops run as one op, which reads each
// input once and writes each output once (Note [fused elementwise]).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/op.h"

namespace kiln {

// Note [fused elementwise]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// The graph compiler's elementwise fusion (kiln/graph/passes/fuse_elementwise.cpp) replaces a
// chain such as relu(x * scale + shift) by one node. Its program is a list of steps, each an
// elementwise op (name + attrs, rebuilt with the op factory) and the values it reads: refs
// 0..inputs-1 are the op's inputs, ref inputs+k is step k's result. `outputs` lists the refs the
// op returns (the values that something outside the chain reads). Every output has the shape of
// the whole computation, the broadcast of the inputs' shapes; an input may broadcast (a bias, a
// per-channel scale, a scalar). All values are of one floating dtype (float32 or float64), except
// that a 0-dim input (a scalar of an expression) may be of any dtype and is converted, as the
// unfused binary ops convert it. The CPU kernel runs the program over blocks of elements with
// each op's own tile (Note [elementwise tiles]), so its results are the unfused chain's, bit for
// bit. Its gradient runs the steps' own vjps in reverse order on the recomputed step results
// (recomputing costs one elementwise pass; keeping the intermediates would cost their memory),
// so it is differentiable to any order exactly as the chain is.
struct FusedStep {
  std::string op;
  nlohmann::json attrs = nlohmann::json::object();
  std::vector<int> args = {};
};

// Runs `program` over `inputs` in `dtype` and returns the values `outputs` names (refs as above).
std::vector<Tensor> fused_elementwise(const std::vector<Tensor>& inputs, DType dtype,
                                      const std::vector<FusedStep>& program,
                                      const std::vector<int>& outputs,
                                      const Loc& loc = Loc::current());

// The attrs of such an op (for the graph pass, which builds the node with make_op).
nlohmann::json fused_elementwise_attrs(int num_inputs, DType dtype,
                                       const std::vector<FusedStep>& program,
                                       const std::vector<int>& outputs);

namespace detail {

struct FusedInstruction {
  OpPtr op;
  std::vector<int> args;
};
struct FusedElementwiseAttrs {
  int num_inputs = 0;
  DType dtype = DType::Float32;
  std::vector<FusedInstruction> program;
  std::vector<int> outputs;
};
const FusedElementwiseAttrs& fused_elementwise_attrs(const Op& op);

}  // namespace detail

}  // namespace kiln
