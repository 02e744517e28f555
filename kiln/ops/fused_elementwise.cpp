// fused_elementwise (Note [fused elementwise] in fused_elementwise.h): the op, its checks and its
// gradient through the steps' own vjps. Its CPU kernel is in
// kiln/backend/cpu/fused_elementwise_ops.cpp (Note [kernel table]).
#include "kiln/ops/fused_elementwise.h"

#include <string>

#include "kiln/ops/binary.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/elementwise_layout.h"
#include "kiln/ops/op_factory.h"

namespace kiln {

namespace {

constexpr const char* kName = "fused_elementwise";

// Reads and checks the attrs: every error names the attribute (a graph loaded from a file may
// carry any JSON here).
detail::FusedElementwiseAttrs parse(const Attrs& a) {
  detail::FusedElementwiseAttrs f;
  f.num_inputs = static_cast<int>(a.i("inputs"));
  if (f.num_inputs < 1) a.fail("inputs", "must be at least 1");
  f.dtype = a.dtype("dtype");
  if (f.dtype != DType::Float32 && f.dtype != DType::Float64)
    a.fail("dtype", std::string("must be float32 or float64, but is ") + dtype_name(f.dtype));
  const nlohmann::json& program = a.at("program");
  if (!program.is_array() || program.empty()) a.fail("program", "must be a non-empty array");
  for (size_t k = 0; k < program.size(); ++k) {
    const nlohmann::json& step = program[k];
    const std::string where = "step " + std::to_string(k);
    if (!step.is_object() || !step.contains("op") || !step["op"].is_string() ||
        !step.contains("args") || !step["args"].is_array())
      a.fail("program", where + " must be an object with \"op\" (a name) and \"args\" (refs)");
    const std::string name = step["op"].get<std::string>();
    const OpDefinition* def = find_op_definition(name);
    if (!def) a.fail("program", where + " names no op: '" + name + "'");
    detail::FusedInstruction ins;
    for (const nlohmann::json& r : step["args"]) {
      if (!r.is_number_integer()) a.fail("program", where + ": refs must be integers");
      const int ref = r.get<int>();
      if (ref < 0 || ref >= f.num_inputs + static_cast<int>(k))
        a.fail("program", where + " reads ref " + std::to_string(ref) +
                              ", which is neither an input nor an earlier step");
      ins.args.push_back(ref);
    }
    if ((ins.args.size() != 1 && ins.args.size() != 2) ||
        !def->schema.accepts_inputs(ins.args.size()) || !def->schema.accepts_outputs(1))
      a.fail("program", where + " ('" + name + "' " + def->schema.describe() + ") with " +
                            std::to_string(ins.args.size()) +
                            " args: steps are elementwise ops of one or two inputs and one output");
    const bool has_attrs = step.contains("attrs") && !step["attrs"].is_null();
    ins.op = make_op(name, has_attrs ? step["attrs"] : nlohmann::json::object());
    f.program.push_back(std::move(ins));
  }
  const int refs = f.num_inputs + static_cast<int>(f.program.size());
  const nlohmann::json& outputs = a.at("outputs");
  if (!outputs.is_array() || outputs.empty()) a.fail("outputs", "must be a non-empty array");
  for (const nlohmann::json& r : outputs) {
    if (!r.is_number_integer()) a.fail("outputs", "refs must be integers");
    const int ref = r.get<int>();
    if (ref < f.num_inputs || ref >= refs)
      a.fail("outputs", "ref " + std::to_string(ref) + " names no step (steps are refs " +
                            std::to_string(f.num_inputs) + ".." + std::to_string(refs - 1) + ")");
    f.outputs.push_back(ref);
  }
  return f;
}

class FusedElementwiseOp final : public Op {
 public:
  FusedElementwiseOp(detail::FusedElementwiseAttrs a, nlohmann::json json)
      : a_(std::move(a)), json_(std::move(json)) {}
  const detail::FusedElementwiseAttrs& fused_attrs() const { return a_; }
  const char* name() const override { return kName; }
  bool memory_bound() const override { return true; }  // Note [rematerialization]
  nlohmann::json attrs() const override { return json_; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    if (static_cast<int>(in.size()) != a_.num_inputs)
      fail(name(), loc, "expected {} inputs, but got {}", a_.num_inputs, in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].dim() > 0 && in[i].dtype() != a_.dtype)
        fail(name(), loc, "expected input {} of dtype {} (or a 0-dim scalar), but got {}", i,
             dtype_name(a_.dtype), in[i].describe());
      if (!detail::devices_compatible(in[i], in[0]))
        fail(name(), loc, "expected every input on {}, but input {} is {}", in[0].device().name(),
             i, in[i].describe());
    }
    std::vector<Shape> shapes;
    shapes.reserve(in.size() + a_.program.size());
    Shape full;
    for (const Tensor& t : in) {
      shapes.push_back(t.shape());
      full = broadcast_shapes(full, t.shape(), name(), loc);
    }
    for (const detail::FusedInstruction& s : a_.program)
      shapes.push_back(s.args.size() == 1 ? shapes[static_cast<size_t>(s.args[0])]
                                          : broadcast_shapes(shapes[static_cast<size_t>(s.args[0])],
                                                             shapes[static_cast<size_t>(s.args[1])],
                                                             s.op->name(), loc));
    const MemoryFormat format = elementwise_format(in, full);
    std::vector<TensorMeta> metas;
    for (int ref : a_.outputs) {
      if (shapes[static_cast<size_t>(ref)] != full)
        fail(name(), loc,
             "output ref {} has shape {}, but every output must have the shape {} of "
             "the whole computation",
             ref, shape_str(shapes[static_cast<size_t>(ref)]), shape_str(full));
      metas.push_back({full, a_.dtype, in[0].device(), format});
    }
    return metas;
  }

  Saves saves() const override { return {true, false}; }
  // One output, always a step's tile, written after the tile's inputs are read (the CPU kernel);
  // with several, a later output's tile would read an input the first one overwrote.
  uint64_t may_overwrite() const override {
    return a_.outputs.size() == 1 ? ~uint64_t{0} : 0;  // Note [in-place computation]
  }

  // The steps' own vjps in reverse order, on step results recomputed from the saved inputs with
  // the public ops (Note [fused elementwise]). With create_graph the recomputation is recorded too,
  // so the gradient is differentiable.
  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const size_t n = static_cast<size_t>(a_.num_inputs);
    const size_t refs = n + a_.program.size();
    std::vector<Tensor> vals(ctx.inputs.begin(), ctx.inputs.end());
    vals.resize(refs);
    std::vector<bool> needs(refs, false);
    for (size_t i = 0; i < n; ++i) needs[i] = ctx.needs_grad[i];
    for (size_t k = 0; k < a_.program.size(); ++k) {
      const detail::FusedInstruction& s = a_.program[k];
      std::vector<Tensor> args;
      for (int r : s.args) {
        args.push_back(vals[static_cast<size_t>(r)]);
        needs[n + k] = needs[n + k] || needs[static_cast<size_t>(r)];
      }
      vals[n + k] = dispatch1(s.op, args, ctx.loc);
    }
    std::vector<Tensor> grads(refs);
    auto accumulate = [&](size_t ref, const Tensor& g) {
      if (!g.defined()) return;
      grads[ref] = grads[ref].defined() ? add(grads[ref], g, ctx.loc) : g;
    };
    for (size_t o = 0; o < a_.outputs.size(); ++o)
      accumulate(static_cast<size_t>(a_.outputs[o]), ctx.grads[o]);
    for (size_t k = a_.program.size(); k-- > 0;) {
      if (!needs[n + k] || !grads[n + k].defined()) continue;
      const detail::FusedInstruction& s = a_.program[k];
      std::vector<TensorMeta> metas;
      std::vector<Tensor> args;
      std::vector<bool> arg_needs;
      for (int r : s.args) {
        const Tensor& v = vals[static_cast<size_t>(r)];
        metas.push_back({v.shape(), v.dtype(), v.device()});
        args.push_back(v);
        arg_needs.push_back(needs[static_cast<size_t>(r)]);
      }
      const std::vector<Tensor> outs{vals[n + k]}, gs{grads[n + k]};
      const VjpContext step{metas, args, outs, gs, arg_needs, ctx.loc, ctx.create_graph};
      const std::vector<Tensor> g = s.op->vjp(step);
      for (size_t j = 0; j < s.args.size(); ++j)
        if (arg_needs[j] && j < g.size()) accumulate(static_cast<size_t>(s.args[j]), g[j]);
    }
    grads.resize(n);
    return grads;
  }

 private:
  detail::FusedElementwiseAttrs a_;
  nlohmann::json json_;
};

OpPtr make_fused(const nlohmann::json& json) {
  const Attrs a(kName, json);
  return std::make_shared<const FusedElementwiseOp>(parse(a), json);
}

KILN_REGISTER_OP(kName, (OpSchema{{"inputs..."}, {"outputs..."}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr { return make_fused(a.json()); });

}  // namespace

nlohmann::json fused_elementwise_attrs(int num_inputs, DType dtype,
                                       const std::vector<FusedStep>& program,
                                       const std::vector<int>& outputs) {
  nlohmann::json steps = nlohmann::json::array();
  for (const FusedStep& s : program)
    steps.push_back({{"op", s.op},
                     {"attrs", s.attrs.is_null() ? nlohmann::json::object() : s.attrs},
                     {"args", s.args}});
  return {{"inputs", num_inputs},
          {"dtype", dtype_name(dtype)},
          {"program", std::move(steps)},
          {"outputs", outputs}};
}

const detail::FusedElementwiseAttrs& detail::fused_elementwise_attrs(const Op& op) {
  const auto* f = dynamic_cast<const FusedElementwiseOp*>(&op);
  KILN_INTERNAL_ASSERT(f != nullptr,
                       std::string("fused_elementwise_attrs of op '") + op.name() + "'");
  return f->fused_attrs();
}

std::vector<Tensor> fused_elementwise(const std::vector<Tensor>& inputs, DType dtype,
                                      const std::vector<FusedStep>& program,
                                      const std::vector<int>& outputs, const Loc& loc) {
  OpPtr op;
  try {
    op = make_fused(
        fused_elementwise_attrs(static_cast<int>(inputs.size()), dtype, program, outputs));
  } catch (const Error& e) {
    fail(kName, loc, "{}", e.what());
  }
  return dispatch(op, inputs, loc);
}

}  // namespace kiln
