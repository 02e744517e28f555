// Algebraic simplification (Note [graph passes]). Each rule keeps Note [pass soundness]:
//   x * 1, 1 * x, x / 1, x - 0, x + 0, 0 + x   -> x, where the constant is a scalar of the
//        expression (a `full` node without inputs) and the result has x's dtype and shape (so
//        no broadcast and no promotion happened). x must be dense (made by a non-view node or a
//        contiguous capture): the product is dense, and a later view of it must stay possible.
//        Note [x + 0]: -0.0 + 0.0 is +0.0, so x + 0 -> x changes the sign of negative zeros;
//        they compare equal, and XLA and TorchScript make the same rewrite.
//   permute(permute(x, p), q)                   -> permute(x, p∘q), or x when that is the identity
//   permute(x, identity)                        -> x
//   view|reshape(view|reshape(x, s), t)         -> view|reshape(x, t) (x dense)
//   view|reshape(x) of x's own shape            -> x
// Replacing a value by x is exact: a view of x with x's geometry reads x's memory as x does.
#include <cstring>

#include "kiln/graph/passes/pass.h"
#include "kiln/graph/passes/rewrite.h"
#include "kiln/ops/op_factory.h"

namespace kiln::graph::passes {
namespace {

bool is(const Node& node, const char* name) {
  return std::strcmp(node.op->name(), name) == 0;
}
bool is_reshape(const Node& node) {
  return is(node, "reshape") || is(node, "view");
}

class Simplifier {
 public:
  explicit Simplifier(Graph& g) : g_(g), facts_(g) {}

  bool run() {
    bool changed = false;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node& node = g_.nodes[i];
      if (facts_.effectful[i] || node.outputs.size() != 1 || node.outputs[0] == kNoValue) continue;
      const int y = node.outputs[0];
      if (facts_.memory_written(y)) continue;
      if (int x = identity_operand(node); x >= 0 && forward(y, x)) {
        changed = true;
      } else if (is(node, "permute")) {
        changed = fuse_permutes(node) || changed;
      } else if (is_reshape(node)) {
        changed = fuse_reshapes(node) || changed;
      }
    }
    return changed;
  }

 private:
  const Node* producer(int value) const {
    const int p = facts_.producer[static_cast<size_t>(value)];
    return p < 0 ? nullptr : &g_.nodes[static_cast<size_t>(p)];
  }
  // The value of a scalar of the expression (`full` without inputs, shape []), or nullopt.
  std::optional<double> scalar_value(int value) const {
    const Node* p = producer(value);
    if (p == nullptr || !is(*p, "full") || !p->inputs.empty() || !g_.value(value).shape.empty())
      return std::nullopt;
    const nlohmann::json a = p->op->attrs();
    return Attrs("full", a).f("value");
  }
  bool dense(int value) const {
    const Node* p = producer(value);
    if (p != nullptr) return !p->op->is_view();
    const int c = facts_.capture_of[static_cast<size_t>(value)];
    return c >= 0 && g_.captures[static_cast<size_t>(c)].tensor.is_contiguous();
  }
  bool same_type(int a, int b) const {
    return g_.value(a).dtype == g_.value(b).dtype && g_.value(a).shape == g_.value(b).shape;
  }
  // Readers of y read x instead, when the rules allow it.
  bool forward(int y, int x) {
    if (facts_.memory_written(x) || !same_type(x, y)) return false;
    const bool x_is_callers =
        facts_.is_input[static_cast<size_t>(x)] || facts_.capture_of[static_cast<size_t>(x)] >= 0;
    if (facts_.is_output[static_cast<size_t>(y)] &&
        (x_is_callers || facts_.is_output[static_cast<size_t>(x)]))
      return false;
    replace_uses(g_, y, x);
    facts_.is_output[static_cast<size_t>(x)] |= facts_.is_output[static_cast<size_t>(y)];
    return true;
  }
  // x for x * 1, x + 0 and the like; -1 otherwise.
  int identity_operand(const Node& node) const {
    if (node.inputs.size() != 2) return -1;
    const int a = node.inputs[0], b = node.inputs[1];
    auto is_const = [&](int v, double c) {
      const auto s = scalar_value(v);
      return s && *s == c;
    };
    int x = -1;
    if (is(node, "mul")) x = is_const(b, 1.0) ? a : is_const(a, 1.0) ? b : -1;
    if (is(node, "div")) x = is_const(b, 1.0) ? a : -1;
    if (is(node, "add")) x = is_const(b, 0.0) ? a : is_const(a, 0.0) ? b : -1;
    if (is(node, "sub")) x = is_const(b, 0.0) ? a : -1;
    return x >= 0 && dense(x) ? x : -1;
  }
  static std::vector<int64_t> dims_of(const Node& node, size_t rank) {
    std::vector<int64_t> dims = Attrs("permute", node.op->attrs()).ints("dims");
    for (int64_t& d : dims)
      if (d < 0) d += static_cast<int64_t>(rank);
    return dims;
  }
  bool fuse_permutes(Node& node) {
    const int x0 = node.inputs[0];
    const size_t rank = g_.value(x0).shape.size();
    std::vector<int64_t> q = dims_of(node, rank);
    int x = x0;
    const Node* inner = producer(x0);
    if (inner != nullptr && is(*inner, "permute") && !facts_.memory_written(x0)) {
      const std::vector<int64_t> p = dims_of(*inner, rank);
      for (int64_t& d : q) d = p[static_cast<size_t>(d)];
      x = inner->inputs[0];
    }
    bool identity = true;
    for (size_t j = 0; j < q.size(); ++j) identity = identity && q[j] == static_cast<int64_t>(j);
    if (identity) return forward(node.outputs[0], x);
    if (x == x0) return false;
    node.op = make_op("permute", {{"dims", q}});
    node.inputs[0] = x;
    return true;
  }
  bool fuse_reshapes(Node& node) {
    const int x0 = node.inputs[0], y = node.outputs[0];
    if (same_type(x0, y) && forward(y, x0)) return true;
    const Node* inner = producer(x0);
    if (inner == nullptr || !is_reshape(*inner) || facts_.memory_written(x0) ||
        !dense(inner->inputs[0]))
      return false;
    node.inputs[0] = inner->inputs[0];
    return true;
  }

  Graph& g_;
  GraphFacts facts_;
};

}  // namespace

bool simplify(Graph& g) {
  const bool changed = Simplifier(g).run();
  return changed;
}

}  // namespace kiln::graph::passes
