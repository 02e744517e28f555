// Elementwise fusion (Note [graph passes]): a chain of unary and binary elementwise ops, such as
// the bias add and activation after a matmul or the scale, shift and relu of a normalization,
// becomes one fused_elementwise node (Note [fused elementwise]) that reads its inputs once and
// writes once. Results are the unfused chain's bit for bit (Note [elementwise tiles]).
//
// Nodes are grouped in one scan in graph order. A node is fusible when its op has an elementwise
// tile, it has no effect, its output is float32 or float64 and not written by any node, and it
// reads values of that dtype (or 0-dim scalars of any dtype) that no node writes. A fusible node
// joins the groups that produced its inputs when they are still open, compute in the same dtype
// and produce values of the same shape (the fused op computes over one shape; inputs may
// broadcast into it): two chains that meet in a binary op become one group. The fused node takes
// the place of the group's last member, so a group is closed as soon as a node outside it reads
// one of its values: that reader must still come after the fused node. A group's outputs are the
// values that nodes outside it or the graph's outputs read; the others never exist in memory.
#include <algorithm>
#include <optional>

#include "kiln/graph/passes/pass.h"
#include "kiln/graph/passes/rewrite.h"
#include "kiln/ops/elementwise_tile.h"
#include "kiln/ops/fused_elementwise.h"
#include "kiln/ops/op_factory.h"

namespace kiln::graph::passes {
namespace {

struct Group {
  std::vector<size_t> members;  // node indices, in order
  DType dtype = DType::Float32;
  SymShape shape;
  bool closed = false;
  int merged_into = -1;  // the group that took this one's members
};

class ElementwiseFuser {
 public:
  explicit ElementwiseFuser(Graph& g) : g_(g), facts_(g), group_of_(g.values.size(), -1) {}

  bool run() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) visit(i);
    bool changed = false;
    std::vector<char> drop(g_.nodes.size(), 0);
    for (size_t gid = 0; gid < groups_.size(); ++gid) {
      Group& group = groups_[gid];
      if (group.members.size() < 2) continue;
      std::sort(group.members.begin(), group.members.end());  // merged groups interleave
      std::optional<Node> fused = fused_node(group, static_cast<int>(gid));
      if (!fused) continue;  // nothing reads the group (dce was skipped)
      changed = true;
      for (size_t m : group.members) drop[m] = 1;
      const size_t last = group.members.back();
      g_.nodes[last] = std::move(*fused);
      drop[last] = 0;
    }
    if (changed) drop_nodes(g_, drop);
    return changed;
  }

 private:
  bool fusible(size_t i) const {
    const Node& node = g_.nodes[i];
    if (facts_.effectful[i] || node.op->is_view() || node.outputs.size() != 1 ||
        node.outputs[0] == kNoValue || (node.inputs.size() != 1 && node.inputs.size() != 2) ||
        !has_elementwise_tile(node.op->name()))
      return false;
    const Value& out = g_.value(node.outputs[0]);
    if ((out.dtype != DType::Float32 && out.dtype != DType::Float64) ||
        facts_.memory_written(out.id))
      return false;
    for (int id : node.inputs) {
      const Value& v = g_.value(id);
      if ((v.dtype != out.dtype && !v.shape.empty()) || facts_.memory_written(id)) return false;
    }
    return true;
  }

  void visit(size_t i) {
    const Node& node = g_.nodes[i];
    if (!fusible(i)) {
      for (int id : node.inputs) close(group_of_[static_cast<size_t>(id)]);
      return;
    }
    const Value& out = g_.value(node.outputs[0]);
    // Every open group of the same dtype and shape that produced an input joins this node's
    // group (two chains meeting in a binary op become one); any other group that produced an
    // input is read from outside and closes.
    int target = -1;
    for (int id : node.inputs) {
      const int gid = find(group_of_[static_cast<size_t>(id)]);
      if (gid < 0) continue;
      Group& group = groups_[static_cast<size_t>(gid)];
      if (group.closed || group.dtype != out.dtype || group.shape != out.shape) {
        group.closed = true;
        continue;
      }
      if (target < 0) {
        target = gid;
      } else if (gid != target) {
        Group& into = groups_[static_cast<size_t>(target)];
        into.members.insert(into.members.end(), group.members.begin(), group.members.end());
        group.members.clear();
        group.merged_into = target;
      }
    }
    if (target < 0) {
      target = static_cast<int>(groups_.size());
      groups_.push_back({{}, out.dtype, out.shape, false});
    }
    groups_[static_cast<size_t>(target)].members.push_back(i);
    group_of_[static_cast<size_t>(out.id)] = target;
  }

  // The group a group was merged into (itself if none); -1 stays -1.
  int find(int gid) const {
    while (gid >= 0 && groups_[static_cast<size_t>(gid)].merged_into >= 0)
      gid = groups_[static_cast<size_t>(gid)].merged_into;
    return gid;
  }

  void close(int gid) {
    gid = find(gid);
    if (gid >= 0) groups_[static_cast<size_t>(gid)].closed = true;
  }

  std::optional<Node> fused_node(const Group& group, int gid) const {
    std::vector<int> inputs;  // value ids, in order of first read
    std::vector<int> ref(g_.values.size(), -1);
    std::vector<int> internal_reads(g_.values.size(), 0);
    for (size_t m : group.members)
      for (int id : g_.nodes[m].inputs)
        if (find(group_of_[static_cast<size_t>(id)]) == gid) {
          ++internal_reads[static_cast<size_t>(id)];
        } else if (ref[static_cast<size_t>(id)] < 0) {
          ref[static_cast<size_t>(id)] = static_cast<int>(inputs.size());
          inputs.push_back(id);
        }
    std::vector<FusedStep> program;
    std::vector<int> output_refs, output_values;
    for (size_t k = 0; k < group.members.size(); ++k) {
      const Node& node = g_.nodes[group.members[k]];
      FusedStep step{node.op->name(), node.op->attrs(), {}};
      for (int id : node.inputs) step.args.push_back(ref[static_cast<size_t>(id)]);
      program.push_back(std::move(step));
      const int v = node.outputs[0];
      ref[static_cast<size_t>(v)] = static_cast<int>(inputs.size() + k);
      if (facts_.uses[static_cast<size_t>(v)] > internal_reads[static_cast<size_t>(v)]) {
        output_refs.push_back(ref[static_cast<size_t>(v)]);
        output_values.push_back(v);
      }
    }
    if (output_refs.empty()) return std::nullopt;
    const Node& last = g_.nodes[group.members.back()];
    Node fused;
    fused.op =
        make_op("fused_elementwise", fused_elementwise_attrs(static_cast<int>(inputs.size()),
                                                             group.dtype, program, output_refs));
    fused.inputs = std::move(inputs);
    fused.outputs = std::move(output_values);
    fused.where = last.where;
    fused.loc = last.loc;
    return fused;
  }

  Graph& g_;
  GraphFacts facts_;
  std::vector<int> group_of_;  // per value: the group whose member produced it, -1 if none
  std::vector<Group> groups_;
};

}  // namespace

bool fuse_elementwise(Graph& g) {
  const bool changed = ElementwiseFuser(g).run();
  if (changed) compact(g);
  return changed;
}

}  // namespace kiln::graph::passes
