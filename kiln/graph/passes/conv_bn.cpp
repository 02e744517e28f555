// Conv + batch-norm fusion (Note [graph passes]): in a frozen (inference) graph, the chain
//   conv2d(x, w, conv_bias?) -> batch_norm_eval(., mean, var, weight?, bias?) [-> add(., r)] [->
//   relu]
// that a model built from separate Conv2d, BatchNorm2d and ReLU modules traces to becomes
//   conv_bn_fold(mean, var, weight?, bias?, conv_bias?) -> conv2d_affine(x, w, scale, shift, r?)
// the ops nn::conv_bn emits itself (Note [conv-bn fold]); `fold` then computes the scale and shift
// once. The convolution's output then never exists unnormalized: one pass over the activation
// instead of three. Only with `freeze`: conv2d_affine is an inference op (not differentiable),
// and a frozen graph is an inference graph. Not bit for bit: folding the statistics into a
// per-channel scale rounds differently (~1e-6 relative), exactly as nn::conv_bn does eagerly.
#include <algorithm>
#include <cstring>

#include "kiln/graph/passes/pass.h"
#include "kiln/graph/passes/rewrite.h"
#include "kiln/ops/op_factory.h"

namespace kiln::graph::passes {
namespace {

bool is(const Node& node, const char* name) {
  return std::strcmp(node.op->name(), name) == 0;
}

class ConvBnFuser {
 public:
  explicit ConvBnFuser(Graph& g) : g_(g), facts_(g) {}

  bool run() {
    std::vector<Node> out;
    out.reserve(g_.nodes.size());
    std::vector<char> drop(g_.nodes.size(), 0);
    bool changed = false;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (drop[i]) continue;
      if (!is(g_.nodes[i], "batch_norm_eval") || !fuse(i, drop, out))
        out.push_back(g_.nodes[i]);
      else
        changed = true;
    }
    if (changed) g_.nodes = std::move(out);
    return changed;
  }

 private:
  // The node that reads `value` when it is the only reader and not a graph output; else -1.
  int sole_reader(int value) const {
    if (facts_.uses[static_cast<size_t>(value)] != 1 ||
        facts_.is_output[static_cast<size_t>(value)])
      return -1;
    for (size_t j = 0; j < g_.nodes.size(); ++j)
      for (int id : g_.nodes[j].inputs)
        if (id == value) return static_cast<int>(j);
    return -1;
  }
  bool plain(int value) const {
    return !facts_.memory_written(value) && facts_.uses[static_cast<size_t>(value)] == 1 &&
           !facts_.is_output[static_cast<size_t>(value)];
  }

  // Replaces the chain ending at batch norm node `b` (and its epilogue) when it matches: appends
  // the fold and the fused convolution to `out`, flags the epilogue nodes in `drop`.
  bool fuse(size_t b, std::vector<char>& drop, std::vector<Node>& out) {
    const Node& bn = g_.nodes[b];
    const int y = bn.inputs[0];
    const int p = facts_.producer[static_cast<size_t>(y)];
    if (p < 0 || !plain(y) || facts_.effectful[b]) return false;
    // The conv is already in `out` (it came before): find it there.
    auto conv_it = std::find_if(out.begin(), out.end(), [&](const Node& n) {
      return n.outputs.size() == 1 && n.outputs[0] == y && is(n, "conv2d");
    });
    if (conv_it == out.end()) return false;
    const Node* conv = &*conv_it;
    const DType dt = g_.value(y).dtype;
    for (size_t k = 1; k < bn.inputs.size(); ++k)
      if (g_.value(bn.inputs[k]).dtype != dt) return false;  // conv_bn_fold takes one dtype
    const nlohmann::json bn_attrs = bn.op->attrs();
    const bool has_weight = bn_attrs.at("has_weight").get<bool>();
    const bool has_bias = bn_attrs.at("has_bias").get<bool>();
    // The epilogue: an add of a same-shaped residual, then a relu, each the only reader.
    int last = bn.outputs[0];
    int residual = kNoValue;
    std::vector<int> epilogue;
    if (int a = sole_reader(last);
        a >= 0 && plain(last) && is(g_.nodes[static_cast<size_t>(a)], "add")) {
      const Node& add = g_.nodes[static_cast<size_t>(a)];
      const int other = add.inputs[0] == last ? add.inputs[1] : add.inputs[0];
      if (add.inputs[0] != add.inputs[1] && g_.value(other).shape == g_.value(last).shape &&
          g_.value(other).dtype == dt && !facts_.effectful[static_cast<size_t>(a)] &&
          facts_.producer[static_cast<size_t>(other)] < static_cast<int>(b)) {
        residual = other;
        epilogue.push_back(a);
        last = add.outputs[0];
      }
    }
    bool relu = false;
    if (int r = sole_reader(last);
        r >= 0 && plain(last) && is(g_.nodes[static_cast<size_t>(r)], "relu")) {
      relu = true;
      epilogue.push_back(r);
      last = g_.nodes[static_cast<size_t>(r)].outputs[0];
    }
    // The fold: conv_bn_fold(mean, var, weight?, bias?, conv_bias?).
    Node fold;
    const bool has_conv_bias = conv->inputs.size() == 3;
    fold.op = make_op("conv_bn_fold", {{"eps", bn_attrs.at("eps")},
                                       {"has_weight", has_weight},
                                       {"has_bias", has_bias},
                                       {"has_conv_bias", has_conv_bias}});
    fold.inputs.assign(bn.inputs.begin() + 1, bn.inputs.end());
    if (has_conv_bias) fold.inputs.push_back(conv->inputs[2]);
    const SymShape c = {g_.value(conv->inputs[1]).shape[0]};
    const int scale = g_.add_value(dt, c), shift = g_.add_value(dt, c);
    fold.outputs = {scale, shift};
    fold.where = bn.where;
    fold.loc = bn.loc;
    // The fold and the fused convolution take the batch norm's place: the conv's inputs, the
    // batch norm's and the residual are all defined before it.
    nlohmann::json attrs = conv->op->attrs();
    attrs["relu"] = relu;
    Node fused;
    fused.op = make_op("conv2d_affine", attrs);
    fused.inputs = {conv->inputs[0], conv->inputs[1], scale, shift};
    if (residual != kNoValue) fused.inputs.push_back(residual);
    fused.outputs = {last};
    fused.where = conv->where;
    fused.loc = conv->loc;
    out.erase(conv_it);
    out.push_back(std::move(fold));
    out.push_back(std::move(fused));
    for (int e : epilogue) drop[static_cast<size_t>(e)] = 1;
    return true;
  }

  Graph& g_;
  GraphFacts facts_;
};

}  // namespace

bool fuse_conv_bn(Graph& g, bool freeze) {
  if (!freeze) return false;
  const bool changed = ConvBnFuser(g).run();
  if (changed) compact(g);
  return changed;
}

}  // namespace kiln::graph::passes
