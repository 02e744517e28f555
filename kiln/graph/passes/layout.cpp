// Layout assignment (Note [layout pass]).
#include <cstring>

#include "kiln/graph/passes/pass.h"
#include "kiln/graph/passes/rewrite.h"
#include "kiln/ops/conv_ops.h"
#include "kiln/ops/op_factory.h"

namespace kiln::graph::passes {

// Note [layout pass]
// ~~~~~~~~~~~~~~~~~~
// A training graph's convolutions run on NCHW activations unless their input is channels-last,
// and oneDNN's training kernels then work in blocked layouts (nChw16c), so every convolution
// reorders its input in and its output out, forward and backward: 11 % of a ResNet-18 training
// step. With channels-last activations the kernels read and write kiln's own memory, and batch
// norm, relu, add and their gradients keep the layout, so a whole chain of convolutions runs
// with no activation reorder (Note [channels-last training] in
// kiln/backend/onednn/conv_primitives.h). Layouts are not part of the IR (values carry dtype and
// shape; every op's infer gives its output's layout from its inputs' at run time), so the whole
// graph's layout is chosen by one decision at its edge: an image input that a training
// convolution reads is laid out channels-last once, by permute -> clone -> permute (what
// contiguous(x, MemoryFormat::kChannelsLast) records), and every reader of the input reads the
// copy. The layout then propagates through the ops' infers; where an op has no channels-last
// kernel (a pooling, a flatten) it returns to NCHW, which is the graph's other edge.
//
// The pass applies only where it pays: float32 inputs of rank 4 with more than one channel and
// more than one pixel (a one-channel image is laid out the same either way), read by a conv2d
// whose purpose is training, on a CPU where conv_prefers_channels_last_training() (oneDNN answers
// NHWC training with its brgemm kernels: AVX-512). On AVX2 it changes nothing. It is not bit for
// bit: the NHWC kernels and the channels-last batch norm sum in other orders (~1e-7 relative per
// step in float32). Float64 graphs never change (their convolutions are kiln's own loops).

namespace {

bool reads_as_training_conv(const Node& node, int value) {
  if (std::strcmp(node.op->name(), "conv2d") != 0 || node.inputs.empty() || node.inputs[0] != value)
    return false;
  return detail::conv2d_attrs(*node.op).purpose == detail::ConvPurpose::kTraining;
}

bool qualifies(const Value& v) {
  if (v.dtype != DType::Float32 || v.shape.size() != 4) return false;
  const Dim &c = v.shape[1], &h = v.shape[2], &w = v.shape[3];
  // A symbolic channel or spatial dim may be 1 at run time; the layout is then still valid.
  return (c.is_symbolic() || c.size > 1) &&
         (h.is_symbolic() || w.is_symbolic() || h.size * w.size > 1);
}

}  // namespace

bool assign_layouts(Graph& g) {
  if (!detail::conv_prefers_channels_last_training()) return false;
  const GraphFacts facts(g);
  std::vector<Node> added;
  for (int input : g.inputs) {
    const Value v = g.value(input);
    if (!qualifies(v) || facts.memory_written(input)) continue;
    bool conv = false;
    for (const Node& node : g.nodes) conv = conv || reads_as_training_conv(node, input);
    if (!conv) continue;
    // x -> permute (N, H, W, C) -> clone (contiguous NHWC) -> permute back: channels-last
    // strides with x's shape.
    const SymShape nhwc{v.shape[0], v.shape[2], v.shape[3], v.shape[1]};
    const int a = g.add_value(v.dtype, nhwc), b = g.add_value(v.dtype, nhwc);
    const int last = g.add_value(v.dtype, v.shape);
    for (Node& node : g.nodes)
      for (int& in : node.inputs)
        if (in == input) in = last;
    Node to_nhwc, copy, back;
    to_nhwc.op = make_op("permute", {{"dims", {0, 2, 3, 1}}});
    to_nhwc.inputs = {input};
    to_nhwc.outputs = {a};
    copy.op = make_op("clone", nlohmann::json::object());
    copy.inputs = {a};
    copy.outputs = {b};
    back.op = make_op("permute", {{"dims", {0, 3, 1, 2}}});
    back.inputs = {b};
    back.outputs = {last};
    added.insert(added.end(), {to_nhwc, copy, back});
  }
  if (added.empty()) return false;
  g.nodes.insert(g.nodes.begin(), added.begin(), added.end());
  return true;
}

}  // namespace kiln::graph::passes
