#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/sym_int.h"
#include "kiln/ops/op.h"

namespace kiln::graph {

// Note [graph IR]
// ~~~~~~~~~~~~~~~
// A graph is a plain struct, meant to be read: values, nodes in execution order, the inputs, the
// outputs and the captured state.
//   Value    one tensor the program computes or reads: dtype, shape (each dim a size or a named
//            symbol such as `batch`), a name where the user gave one. Values are numbered in
//            order of creation and printed %0, %1, ...
//   Node     one op call: the op itself (rebuilt from its name and attrs through the op factory,
//            Note [op factory], so a node holds exactly what a serialized graph holds), its
//            input and output values, and the user's source line.
//   inputs   values bound to the caller's tensors, in signature order;
//   captures values bound to tensors the function read without creating them (parameters,
//            buffers, constants), held by identity: the graph keeps the Tensor handle, never a
//            copy, so an optimizer step or a load_state_dict is seen by the next call;
//   outputs  the values returned, in order.
// Effects are ordinary nodes (Note [effects]): an in-place update, a random draw or an optimizer
// step is a node whose op declares what it writes. Values name memory, as eager tensors do, so
// a node that writes an input (mutates(), alias_of) changes what the written value's memory holds;
// the graph's order is the program's order and a pass that reorders nodes must respect the
// declared effects and the view aliasing (is_view) that the nodes carry.

// One dim: a static size or a symbol ("batch") that stands for any size, 0 and 1 included.
struct Dim {
  int64_t size = 0;    // the static size; for a symbol, the size seen while tracing
  std::string symbol;  // empty for a static dim
  bool is_symbolic() const { return !symbol.empty(); }
  bool operator==(const Dim&) const = default;
};
using SymShape = std::vector<Dim>;

SymShape static_shape(const Shape& shape);
std::string format_shape(const SymShape& shape);  // [batch, 64, 28, 28]

struct Value {
  int id = 0;
  DType dtype = DType::Float32;
  SymShape shape;
  std::string name;  // an input's or a capture's name; empty for intermediates
};

// Where the user called the op: kept as text so that a loaded graph still names the line.
struct SourceLine {
  std::string file;  // as the compiler wrote it
  uint32_t line = 0;
  std::string function;
  bool known() const { return !file.empty(); }
  std::string format() const;  // "model.cpp:41" (the file's last path component)
};

// An output an op left undefined (an optional output it did not compute).
constexpr int kNoValue = -1;

// Note [symbolic attrs]
// ~~~~~~~~~~~~~~~~~~~~~
// A node whose attrs hold sizes computed from a traced tensor's size (Note [symbolic sizes] in
// kiln/core/sym_int.h: reshape's shape from x.dim_size(0)) keeps, beside the op, which attrs are
// symbolic: a JSON pointer into the attrs ("/shape/0") and the expression, whose leaves are dims
// of values defined before the node ("size(%3, 0) * 2"). The op itself holds the sizes of the
// trace. Before the node runs, the executor evaluates each expression from the sizes of the
// values in this call and rebuilds the op from the patched attrs (op_for_call), so the node is
// right for every size; a node without symbolic attrs runs its op as it is. After a symbolic
// trace, a leaf that is a static dim is folded into a number, and an attr whose expression is
// then a number is no longer symbolic (fold_static_sym_attrs, kiln/graph/symbolic.h).
struct Node {
  OpPtr op;
  SymAttrs sym_attrs;
  std::vector<int> inputs;   // value ids
  std::vector<int> outputs;  // value ids, or kNoValue
  SourceLine where;
  // The call site itself, for graphs traced in this process (errors at run time then read as
  // eager ones do); absent in a graph loaded from JSON, whose errors use `where`.
  std::optional<Loc> loc;
};

struct Capture {
  int value = 0;
  Tensor tensor;  // by identity
};

struct Graph {
  std::string name = "graph";
  std::vector<Value> values;  // values[i].id == i
  std::vector<Node> nodes;    // in execution order
  std::vector<int> inputs;
  std::vector<Capture> captures;
  std::vector<int> outputs;
  // Note [size guards] (kiln/core/sym_int.h): what the trace assumed of the inputs' sizes; each
  // leaf is a dim of a graph input. run() checks them before the first node.
  std::vector<SymGuard> guards;

  // Adds a value and returns its id.
  int add_value(DType dtype, SymShape shape, std::string name = "");
  const Value& value(int id) const;

  // Checks the invariants a well-formed graph keeps (ids in range, every node input defined
  // before use, each value defined once, outputs defined, op schemas accept the arity); a
  // violation is an InternalError for a graph kiln built and a kiln::Error naming the node for one
  // that was loaded (`loaded`).
  void validate(bool loaded = false) const;
};

// The node's op for a call in which value v's dim d has size dim_of(v, d): its own op when it has
// no symbolic attrs, else the op rebuilt from its attrs with each expression evaluated.
OpPtr op_for_call(const Node& node, const std::function<int64_t(int value, int dim)>& dim_of,
                  const Loc& loc);
// The values whose sizes the node's symbolic attrs read: a pass that removes, merges or
// renumbers values treats each as a use (kiln/graph/passes/rewrite.cpp).
void for_each_sym_leaf(const Node& node, const std::function<void(int value)>& f);
void remap_sym_leaves(Node& node, const std::function<int(int value)>& map);
// The node's attrs with each symbolic attr shown as its expression, for text and DOT.
nlohmann::json display_attrs(const Node& node);

// The readable text of a graph, one line per node:
//   graph forward(%0 x: float32[batch, 1, 28, 28]) {
//     capture %1 fc.weight: float32[10, 784]
//     %2 = reshape(%0) {shape=[-1,784]} : float32[batch, 784]  # model.cpp:12
//     ...
//     return %5
//   }
std::string to_text(const Graph& g);

// A compact rendering of an op's attrs for text and DOT: {stride=[1,1], padding=[1,1]}.
std::string format_attrs(const nlohmann::json& attrs);

}  // namespace kiln::graph
