#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "kiln/autograd/node.h"
#include "kiln/core/tensor.h"

namespace kiln::autograd {

class FunctionNode;

// What a custom function's forward leaves for its backward.
class FunctionCtx {
 public:
  // Keeps tensors for backward (replacing any saved before). They are version-checked like the
  // tensors built-in ops save: an in-place change before backward is an error naming both the
  // function and the in-place op. Saving an output of forward is fine (no reference cycle; it gets
  // its history back on unpack).
  void save_for_backward(std::vector<Tensor> tensors);
  // The saved tensors, in the order saved. Throws if one was modified in place since.
  std::vector<Tensor> saved_tensors() const;

  // One entry per input: whether backward must produce its gradient (set before forward runs).
  std::vector<bool> needs_input_grad;
  // Non-tensor values for backward (and attributes passed to apply()).
  nlohmann::json attrs = nlohmann::json::object();

 private:
  friend class FunctionNode;
  std::vector<Tensor> pending_;     // as given, until forward has returned
  std::vector<SavedTensor> saved_;  // after forward: version-checked copies
  FunctionNode* node_ = nullptr;    // set once the tape node owns this context
};

using FunctionForward = std::vector<Tensor> (*)(FunctionCtx&, const std::vector<Tensor>&);
using FunctionBackward = std::vector<Tensor> (*)(FunctionCtx&, const std::vector<Tensor>&);

// Runs a custom function (see Function below); `name` appears in errors and as the node's name.
std::vector<Tensor> apply_function(const char* name, FunctionForward forward,
                                   FunctionBackward backward, const std::vector<Tensor>& inputs,
                                   nlohmann::json attrs, const Loc& loc);

// Makes a custom function rebuildable from (name, attrs) by make_op (kiln/ops/op_factory.h), as a
// graph loader needs; see KILN_REGISTER_FUNCTION below. The name must be unique among ops.
bool register_function(const char* name, FunctionForward forward);

// The tape node of one call of a custom function: calls the user's backward.
class FunctionNode final : public Node {
 public:
  // Without `record` the node only carries the context of an unrecorded call.
  FunctionNode(const char* name, FunctionBackward backward, const std::vector<Tensor>& inputs,
               bool record, const Loc& loc);
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override;
  void release_saved() override;
  size_t num_outputs() const override { return output_metas_.size(); }

  FunctionCtx& ctx() { return ctx_; }
  // Called once forward returned: makes the outputs this node's, and packs the saved tensors.
  void attach(std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs);

 private:
  friend class FunctionCtx;
  const char* name_;
  FunctionBackward backward_;
  FunctionCtx ctx_;
  std::vector<TensorMeta> input_metas_, output_metas_;
};

// Note [custom functions]: the C++ counterpart of torch.autograd.Function, for an operation whose
// gradient autograd should not derive from its pieces (a fused kernel, a numerically better
// formula, a straight-through estimator):
//
//   struct MyExp : kiln::autograd::Function<MyExp> {
//     static constexpr const char* kName = "my_exp";
//     static std::vector<Tensor> forward(FunctionCtx& ctx, const std::vector<Tensor>& in) {
//       Tensor y = kiln::exp(in[0]);
//       ctx.save_for_backward({y});
//       return {y};
//     }
//     static std::vector<Tensor> backward(FunctionCtx& ctx, const std::vector<Tensor>& grads) {
//       return {kiln::mul(grads[0], ctx.saved_tensors()[0])};
//     }
//   };
//   Tensor y = MyExp::apply({x})[0];
//
// A call is one op named kName in the dispatcher's stream (Note [function op] in function.cpp):
// forward runs with grad mode off, and the ops it calls are not seen by dispatch modes (a tracer
// records the function, not its insides). On meta inputs forward runs on meta tensors, which is
// the function's shape inference. When grad mode is on and an input requires grad, a FunctionNode
// is recorded and the outputs get it as grad_fn. backward receives one gradient per output (zeros
// where none flowed) and must return one per input (undefined = no gradient), each with the
// input's shape; it runs with grad mode as the engine sets it, so a backward written with kiln ops
// supports create_graph (higher-order gradients). Errors name kName and the line of apply().
template <class Derived>
struct Function {
  static std::vector<Tensor> apply(const std::vector<Tensor>& inputs,
                                   const Loc& loc = Loc::current()) {
    return apply_function(Derived::kName, &Derived::forward, &Derived::backward, inputs,
                          nlohmann::json::object(), loc);
  }
  // `attrs` is copied into ctx.attrs before forward runs (non-tensor arguments).
  static std::vector<Tensor> apply(const std::vector<Tensor>& inputs, nlohmann::json attrs,
                                   const Loc& loc = Loc::current()) {
    return apply_function(Derived::kName, &Derived::forward, &Derived::backward, inputs,
                          std::move(attrs), loc);
  }
};

// Registers Type (a Function<Type>) under Type::kName, at namespace scope in one source file:
//   KILN_REGISTER_FUNCTION(MyExp);
#define KILN_REGISTER_FUNCTION(Type)                                            \
  static const bool KILN_FUNCTION_CONCAT(kiln_function_registered_, __LINE__) = \
      ::kiln::autograd::register_function(Type::kName, &Type::forward)
#define KILN_FUNCTION_CONCAT_INNER(a, b) a##b
#define KILN_FUNCTION_CONCAT(a, b) KILN_FUNCTION_CONCAT_INNER(a, b)

}  // namespace kiln::autograd
