#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// Note [faithful meta]: output metadata computed by an op's inference, without touching memory,
// and the same on every device: a meta tensor made from it has the shape, dtype, strides, offset
// and aliasing the eager result has (the registry test checks all of them on every sample).
struct TensorMeta {
  Shape shape;
  DType dtype = DType::Float32;
  Device device = kCPU;
  // The layout the output is allocated in (Note [channels-last]); values never depend on it.
  MemoryFormat memory_format = MemoryFormat::kContiguous;
  // A view's geometry (view ops only; the others are dense in memory_format): its strides, its
  // storage offset, and which input's storage it shares.
  Strides strides = {};
  int64_t storage_offset = 0;
  int alias_of = -1;
};

// The common infer result, one output, built without the copies `return {{...}}` makes (the
// initializer list copies the meta and its shape), which the eager 1-element add showed.
inline std::vector<TensorMeta> one_output(TensorMeta&& meta) {
  std::vector<TensorMeta> metas;
  metas.reserve(1);
  metas.push_back(std::move(meta));
  return metas;
}

struct VjpContext {
  const std::vector<TensorMeta>& input_metas;  // shape/dtype of every input, always available
  const std::vector<Tensor>& inputs;           // saved inputs (undefined where the op saves none)
  const std::vector<Tensor>& outputs;          // saved outputs (undefined where the op saves none)
  const std::vector<Tensor>& grads;            // gradient of every output (zeros where none flowed)
  const std::vector<bool>& needs_grad;         // which inputs need a gradient
  // The forward call's line: ops the vjp calls may pass it, and errors name it.
  const Loc& loc;
  // Whether the gradient itself is being differentiated (backward(create_graph = true), graph
  // autodiff of a training step): a vjp may run a fused, non-differentiable kernel only when
  // this is false. It is explicit, so the same op stream means the same in every mode.
  bool create_graph = false;
  // Note [size-free backward]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~
  // A vjp that needs an input's size (sum's gradient expands to it, mean's divides by its
  // count) asks for it here rather than reading input_metas' shapes: when a trace recorded the
  // forward, the tape kept each input's symbolic sizes (Note [symbolic sizes]), so the gradient
  // traced in that trace is sized from the batch of each call, not the batch traced. Outside a
  // trace (or in one that cannot read those sizes) the answers are the metas' numbers.
  const std::vector<SymSizes>* input_sizes = nullptr;
  SymSizes sizes_of(size_t input) const;
  SymInt size_of(size_t input, int64_t dim) const;
  SymInt numel_of(size_t input) const;
  // The forward's symbolic attrs as the trace recorded them (Note [symbolic attrs]): a vjp that
  // passes an attr on (slice's start to slice_backward) asks for it as a size here: the
  // expression at `path` where the trace recorded one it can use, else `value`.
  const SymAttrs* sym_attrs = nullptr;
  SymInt sym_attr(std::string_view path, int64_t value) const;
};

// Note [op definition]: an operator is declared once, as a subclass of Op:
//   name + attrs   identity, serialization, error text; attrs are the constructor's arguments and
//                  all of the op's state, and a factory registered under the (unique) name
//                  rebuilds the op from them (Note [op factory] in op_factory.h)
//   infer          validates inputs and returns output metadata (Note [faithful meta]); runs for
//                  every device, meta too, and chooses the output layout
//   forward        computes on real memory; defaults to "allocate outputs from infer's metadata,
//                  then kernel()", which runs the kernel a backend registered for the op (Note
//                  [kernel table]); view ops, composites and ops that write an input override it
//   vjp            the gradient, written with kiln's public ops so that it is itself recorded,
//                  differentiable (higher-order grads) and traceable
//   mutates        the inputs it writes (Note [effects])
// For example (kiln/ops/indexing.cpp):
//   class GatherOp final : public Op {
//     explicit GatherOp(int64_t dim);
//     const char* name() const override { return "gather"; }
//     nlohmann::json attrs() const override { return {{"dim", dim_}}; }
//     infer(...), vjp(...)
//   };   // its kernel: KILN_REGISTER_KERNEL("gather", ...) in kiln/backend/cpu/indexing_ops.cpp
//   KILN_REGISTER_OP("gather", (OpSchema{{"x", "index"}, {"y"}}),
//                    [](const Attrs& a) -> OpPtr { return std::make_shared<const
//                    GatherOp>(a.i("dim")); });
// The dispatcher (dispatcher.h) is the only consumer that calls these; eager execution, autograd,
// and later the tracer and the exporter all go through it and its modes (Note [dispatch modes]),
// so no consumer switches over ops.
class Op {
 public:
  virtual ~Op() = default;
  virtual const char* name() const = 0;
  virtual nlohmann::json attrs() const { return nlohmann::json::object(); }

  virtual std::vector<TensorMeta> infer(const std::vector<Tensor>& inputs,
                                        const Loc& loc) const = 0;
  virtual std::vector<Tensor> forward(const std::vector<Tensor>& inputs,
                                      const std::vector<TensorMeta>& metas) const;
  // Runs the kernel registered for (name(), the outputs' device) in the kernel table. Not
  // virtual: a definition never carries its own kernel (Note [kernel table]).
  void kernel(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) const;

  virtual bool differentiable() const { return true; }
  // Returns one gradient per input (undefined where not needed or not differentiable).
  virtual std::vector<Tensor> vjp(const VjpContext& ctx) const;

  // What the tape must keep alive for vjp. Saving less lowers training memory.
  struct Saves {
    bool inputs = true;
    bool outputs = false;
    // With outputs: which ones (bit i for output i). An output that the vjp does not read but a
    // later op saves anyway should not be kept twice (batch_norm's y is relu's input).
    uint64_t output_mask = ~uint64_t{0};
    // With inputs: which ones (bit i for input i).
    uint64_t input_mask = ~uint64_t{0};
  };
  virtual Saves saves() const { return {}; }
  // What to keep when only the inputs flagged in needs_grad will be asked a gradient: a vjp that
  // reads an input only for another input's gradient saves it only when that one needs it (mul,
  // conv2d), so an in-place change of a tensor whose gradient no one needs is no error. Inputs
  // left out are undefined in VjpContext::inputs. Defaults to saves().
  virtual Saves saves_for(const std::vector<bool>& needs_grad) const {
    (void)needs_grad;
    return saves();
  }
  // View ops return outputs sharing inputs[0]'s storage; in-place checks need to know.
  virtual bool is_view() const { return false; }
  // Note [effects]: which inputs the op writes in place (bit i for input i), like the "(a!)" of a
  // PyTorch schema. An output that is a written input says so with TensorMeta::alias_of. Every
  // write to a tensor's memory outside a kernel's own outputs is such an op (copy_, fill_,
  // optimizer updates), so the op stream is the whole program.
  virtual uint64_t mutates() const { return 0; }
  // Note [in-place computation]: the inputs (bit i for input i) whose memory the kernel may
  // compute output 0 into, when that input has output 0's shape, dtype and dense layout and nothing
  // else will read it: the kernel reads each element before it writes the same element and reads
  // no other element of it later (elementwise ops). The memory planner (graph/memory_plan.h) then
  // places the output on the input's bytes; nothing else changes, eager calls included.
  virtual uint64_t may_overwrite() const { return 0; }
  // Note [rematerialization]: true when computing the outputs costs about one pass over the
  // operands' memory (elementwise ops, normalizations), so that a graph may compute them again
  // where they are read late instead of keeping them alive in between (graph/passes/remat.cpp).
  // Only pure ops are recomputed; a matmul or a convolution is never worth it.
  virtual bool memory_bound() const { return false; }
  // Note [random effects]: a random op (rand, randn, randint, bernoulli) draws from the generator
  // state its attrs hold (Note [random ops]). random_blocks says how many blocks of the stream an
  // execution with these outputs draws (Note [random streams]); at_stream rebuilds the op drawing
  // from another state. The graph executor reserves fresh blocks of the default generator for
  // every random node on every run (Note [graph executor]), so a graph draws new numbers on each
  // call, the ones eager code would draw at that point of the stream.
  virtual bool draws_random() const { return false; }
  virtual uint64_t random_blocks(const std::vector<TensorMeta>& outputs) const {
    (void)outputs;
    return 0;
  }
  virtual std::shared_ptr<const Op> at_stream(uint64_t seed, uint64_t offset) const {
    (void)seed, (void)offset;
    return nullptr;
  }
  // Floating-point operations of one execution, for the profiler's GFLOP/s (0: not counted).
  virtual double flops(const std::vector<Tensor>& inputs,
                       const std::vector<Tensor>& outputs) const {
    (void)inputs, (void)outputs;
    return 0.0;
  }
};

using OpPtr = std::shared_ptr<const Op>;

}  // namespace kiln
