#pragma once
#include <fmt/format.h>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// Note [symbolic sizes]
// ~~~~~~~~~~~~~~~~~~~~~
// A SymInt is a size that a trace records as a value rather than a number (PyTorch's SymInt).
// In eager code it is a plain integer: no node, no cost. While a trace runs, the size of a traced
// tensor is a SymInt whose node says where it comes from — "dim 0 of value %3" — and arithmetic
// on it (+ - * / % and sym_min / sym_max, C++'s truncating division and remainder) builds an
// expression. Every SymInt also carries its hint: the number it has at the sizes being traced, so
// code that needs a number now (a check, a loop bound) still gets one.
// An op whose attributes take sizes (reshape's shape, expand's, a factory's) records which of
// its attrs are symbolic (Note [symbolic attrs] in kiln/graph/graph.h): the node keeps the hint
// in its attrs and the expression beside it, and the executor evaluates the expression from the
// sizes of the call before it runs the op. So `view(x, {x.size(0), -1})` is one graph for every
// batch size, and nothing about a size is baked into a graph without a record of it.
class SymNode;

class SymInt {
 public:
  SymInt() = default;
  template <std::integral I>
  requires(!std::same_as<I, bool>) SymInt(I value)
      : hint_(static_cast<int64_t>(value)) {}  // NOLINT: a plain integer
  SymInt(int64_t hint, std::shared_ptr<const SymNode> node) : hint_(hint), node_(std::move(node)) {}

  // A dim of a traced value: `dim` of value `value`, of size `hint` at the traced sizes.
  // `owner` names the graph the value belongs to (the trace that made the leaf), so that a size of
  // one graph is never read as another's value of the same number.
  static SymInt dim_of(int value, int dim, int64_t hint, const void* owner = nullptr);
  // Whether every leaf belongs to `owner`.
  bool owned_by(const void* owner) const;

  bool is_symbolic() const { return node_ != nullptr; }
  int64_t hint() const { return hint_; }
  const std::shared_ptr<const SymNode>& node() const { return node_; }
  // Sizes convert as integers do. A symbolic one converted while a trace records is a guard that
  // it keeps this number (Note [size guards]): the graph would hold the number for every size.
  operator int64_t() const { return node_ ? converted() : hint_; }  // NOLINT

  // The value for other sizes: each leaf "dim d of value v" is `dim_of(v, d)`.
  int64_t evaluate(const std::function<int64_t(int value, int dim)>& dim_of) const;
  // Calls `f(value, dim)` for each leaf.
  void for_each_leaf(const std::function<void(int value, int dim)>& f) const;
  // The same expression with each leaf replaced by `replace(value, dim, leaf)`.
  SymInt map_leaves(
      const std::function<SymInt(int value, int dim, const SymInt& leaf)>& replace) const;
  // "size(%3, 0) * 2"; a plain integer prints as itself.
  std::string format() const;
  // The same with each leaf written as `leaf(value, dim)` ("batch * 2").
  std::string format(const std::function<std::string(int value, int dim)>& leaf) const;
  // 7, or {"dim": [3, 0]}, or {"mul": [a, b]}; from_json refuses anything else, naming `where`.
  nlohmann::json to_json() const;
  static SymInt from_json(const nlohmann::json& j, const std::string& where);
  // Same expression (structure and leaves; hints are not compared).
  bool same_expression(const SymInt& other) const;

 private:
  int64_t converted() const;  // records the conversion (sym_int.cpp)

  int64_t hint_ = 0;
  std::shared_ptr<const SymNode> node_;
};

enum class SymOp : uint8_t { kDim, kAdd, kSub, kMul, kDiv, kMod, kMin, kMax };

class SymNode {
 public:
  SymOp op = SymOp::kDim;
  int value = -1, dim = -1;  // SymOp::kDim
  const void* owner = nullptr;
  SymInt a, b;  // the operands otherwise
};

SymInt sym_binary(SymOp op, const SymInt& a, const SymInt& b);
SymInt sym_min(const SymInt& a, const SymInt& b);
SymInt sym_max(const SymInt& a, const SymInt& b);

// Arithmetic on sizes: a SymInt with any integer, in either order, stays a SymInt (the integer
// overloads are templates so that they are exact matches and never ambiguous with the built-in
// operators reached through the conversion to int64_t).
#define KILN_SYM_OPERATOR(op, kind)                             \
  inline SymInt operator op(const SymInt& a, const SymInt& b) { \
    return sym_binary(kind, a, b);                              \
  }                                                             \
  template <std::integral I>                                    \
  SymInt operator op(const SymInt& a, I b) {                    \
    return sym_binary(kind, a, SymInt(b));                      \
  }                                                             \
  template <std::integral I>                                    \
  SymInt operator op(I a, const SymInt& b) {                    \
    return sym_binary(kind, SymInt(a), b);                      \
  }
KILN_SYM_OPERATOR(+, SymOp::kAdd)
KILN_SYM_OPERATOR(-, SymOp::kSub)
KILN_SYM_OPERATOR(*, SymOp::kMul)
KILN_SYM_OPERATOR(/, SymOp::kDiv)
KILN_SYM_OPERATOR(%, SymOp::kMod)
#undef KILN_SYM_OPERATOR

// Note [size guards]: comparing a symbolic SymInt (an `if` on x.size(0) == 1) gives the answer at
// the traced sizes and, while a trace runs, records it as a guard: the comparison, its answer and
// the user's line. Converting a symbolic size to a number (`int64_t n = x.size(0)`, `double(..)`,
// a Shape built from it, an `if` on `x.size(0) % 2`) records the guard that it keeps the number
// it has. A guard whose answer differs between the two probe traces is a trace error at that line
// (the code takes another path, or bakes another number, for another size); one whose answer is
// the same is kept in the graph and checked before every call. graph::function retraces a call
// that breaks one, specialized to the call's sizes, with the reason ("batch != 1 was assumed at
// model.cpp:12"); graph::run refuses it, naming the assumption and its line. Never a silently
// wrong result.
enum class SymCompare : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
const char* sym_compare_name(SymCompare c);  // "==", ...
bool sym_compare_apply(SymCompare c, int64_t a, int64_t b);

struct SymGuard {
  SymCompare compare = SymCompare::kEq;
  SymInt a, b;
  bool result = false;     // the answer at the traced sizes
  std::string where;       // the user's line, "model.cpp:12"
  bool converted = false;  // a conversion to a number: `a == b` with b its number
  // "size(%0, 0) == 1"
  std::string format() const;
};

bool sym_compare(SymCompare c, const SymInt& a, const SymInt& b);

// Comparisons are out-of-line functions of libkiln for each integer type, so that the user's
// line a guard records is the caller's (an inline function's frame would name this header).
#define KILN_SYM_COMPARE_WITH(op, T)      \
  bool operator op(const SymInt& a, T b); \
  bool operator op(T a, const SymInt& b);
#define KILN_SYM_COMPARE(op)                          \
  bool operator op(const SymInt& a, const SymInt& b); \
  KILN_SYM_COMPARE_WITH(op, int)                      \
  KILN_SYM_COMPARE_WITH(op, long)                     \
  KILN_SYM_COMPARE_WITH(op, long long)                \
  KILN_SYM_COMPARE_WITH(op, unsigned)                 \
  KILN_SYM_COMPARE_WITH(op, unsigned long)            \
  KILN_SYM_COMPARE_WITH(op, unsigned long long)
KILN_SYM_COMPARE(==)
KILN_SYM_COMPARE(!=)
KILN_SYM_COMPARE(<)
KILN_SYM_COMPARE(<=)
KILN_SYM_COMPARE(>)
KILN_SYM_COMPARE(>=)
#undef KILN_SYM_COMPARE
#undef KILN_SYM_COMPARE_WITH

// A list of sizes as the shape-taking APIs accept it: integers, SymInts or a mix.
using SymSizes = std::vector<SymInt>;
std::vector<int64_t> hints_of(const SymSizes& sizes);
bool any_symbolic(const SymSizes& sizes);

// Note [symbolic attrs]: one symbolic attribute of the next op a thread dispatches, by JSON
// pointer into its attrs ("/shape/0").
struct SymAttr {
  std::string path;
  SymInt value;
};
using SymAttrs = std::vector<SymAttr>;

// The symbolic elements of `sizes`, as attrs under `path` ("/shape" -> "/shape/0", ...).
void add_sym_attrs(SymAttrs& out, const std::string& path, const SymSizes& sizes);

// Declares that the next call of op `op` on this thread takes `attrs` symbolically, for the
// tracer to record (a no-op when `attrs` is empty). Scoped: an op that is not traced leaves them.
class SymAttrScope {
 public:
  SymAttrScope(std::string_view op, SymAttrs attrs);
  ~SymAttrScope();
  SymAttrScope(const SymAttrScope&) = delete;
  SymAttrScope& operator=(const SymAttrScope&) = delete;

 private:
  bool active_ = false;
};

class Tensor;
// The size of dim `dim` of `t`: a plain integer, except while a trace records this thread's ops
// and `t` is one of its values, when it is that value's dim (SymInt::dim_of).
SymInt sym_size(const Tensor& t, int64_t dim);
SymSizes sym_sizes(const Tensor& t);

namespace detail {
// The symbolic attrs declared for op `op`, taken (so they go to one node only); empty when none.
SymAttrs take_sym_attrs(std::string_view op);
// What sym_size asks while a trace runs (the tracer sets it, Note [tracer]): the SymInt of `t`'s
// dim `dim` of size `size`. Returns the hook it replaces.
using SymSizeHook = SymInt (*)(const Tensor& t, int64_t dim, int64_t size);
SymSizeHook set_sym_size_hook(SymSizeHook hook);
// Where a comparison of a symbolic SymInt goes while a trace runs (Note [size guards]).
using SymGuardHook = void (*)(SymGuard guard);
SymGuardHook set_sym_guard_hook(SymGuardHook hook);
// Hands `guard` to the hook (a branch's guard, lifted to the trace around it); none: dropped.
void record_sym_guard(SymGuard guard);
// Whether a trace records this thread's ops now (a size hook is installed).
bool sizes_are_traced();
// Whether `s` may be used by the op dispatched now: a plain integer always; a symbolic one only
// while the trace that owns its leaves records (a tape node keeps the sizes its forward saw, and
// its backward may run elsewhere: Note [size-free backward] in kiln/ops/op.h). The tracer sets
// the hook; with none, no symbolic size is usable.
using SymUsableHook = bool (*)(const SymInt& s);
SymUsableHook set_sym_usable_hook(SymUsableHook hook);
bool sym_usable(const SymInt& s);
}  // namespace detail

}  // namespace kiln

// A size prints as its number (in an error message, the size at the traced sizes); format()
// writes the expression.
template <>
struct fmt::formatter<kiln::SymInt> : fmt::formatter<int64_t> {
  template <class Context>
  auto format(const kiln::SymInt& s, Context& ctx) const {
    return fmt::formatter<int64_t>::format(s.hint(), ctx);
  }
};
