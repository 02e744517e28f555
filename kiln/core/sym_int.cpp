#include "kiln/core/sym_int.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "kiln/core/call_site.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"

namespace kiln {

namespace {

struct OpInfo {
  SymOp op;
  const char* name;    // in JSON
  const char* symbol;  // in text; empty for the functions
};
constexpr OpInfo kOps[] = {{SymOp::kAdd, "add", "+"}, {SymOp::kSub, "sub", "-"},
                           {SymOp::kMul, "mul", "*"}, {SymOp::kDiv, "div", "/"},
                           {SymOp::kMod, "mod", "%"}, {SymOp::kMin, "min", ""},
                           {SymOp::kMax, "max", ""}};

const OpInfo& info(SymOp op) {
  for (const OpInfo& i : kOps)
    if (i.op == op) return i;
  throw InternalError("kiln internal error: SymInt node with no operation");
}

// C++'s arithmetic on int64_t; what cannot be computed (division by zero, overflow) is an error.
int64_t apply(SymOp op, int64_t a, int64_t b) {
  int64_t r = 0;
  switch (op) {
    case SymOp::kAdd:
      if (__builtin_add_overflow(a, b, &r)) break;
      return r;
    case SymOp::kSub:
      if (__builtin_sub_overflow(a, b, &r)) break;
      return r;
    case SymOp::kMul:
      if (__builtin_mul_overflow(a, b, &r)) break;
      return r;
    case SymOp::kDiv:
    case SymOp::kMod:
      if (b == 0)
        throw Error(fmt::format("[SymInt] {} {} 0: a size divided by zero", a, info(op).symbol));
      if (a == INT64_MIN && b == -1) break;
      return op == SymOp::kDiv ? a / b : a % b;
    case SymOp::kMin:
      return std::min(a, b);
    case SymOp::kMax:
      return std::max(a, b);
    case SymOp::kDim:
      break;
  }
  throw Error(fmt::format("[SymInt] {} {} {} overflows int64", a, info(op).name, b));
}

}  // namespace

SymInt SymInt::dim_of(int value, int dim, int64_t hint, const void* owner) {
  auto node = std::make_shared<SymNode>();
  node->owner = owner;
  node->op = SymOp::kDim;
  node->value = value;
  node->dim = dim;
  return SymInt(hint, std::move(node));
}

SymInt sym_binary(SymOp op, const SymInt& a, const SymInt& b) {
  const int64_t hint = apply(op, a.hint(), b.hint());
  if (!a.is_symbolic() && !b.is_symbolic()) return SymInt(hint);
  auto node = std::make_shared<SymNode>();
  node->op = op;
  node->a = a;
  node->b = b;
  return SymInt(hint, std::move(node));
}

SymInt sym_min(const SymInt& a, const SymInt& b) {
  return sym_binary(SymOp::kMin, a, b);
}
SymInt sym_max(const SymInt& a, const SymInt& b) {
  return sym_binary(SymOp::kMax, a, b);
}

int64_t SymInt::evaluate(const std::function<int64_t(int value, int dim)>& dim_of) const {
  if (!node_) return hint_;
  if (node_->op == SymOp::kDim) return dim_of(node_->value, node_->dim);
  return apply(node_->op, node_->a.evaluate(dim_of), node_->b.evaluate(dim_of));
}

bool SymInt::owned_by(const void* owner) const {
  if (!node_) return true;
  if (node_->op == SymOp::kDim) return node_->owner == owner;
  return node_->a.owned_by(owner) && node_->b.owned_by(owner);
}

void SymInt::for_each_leaf(const std::function<void(int value, int dim)>& f) const {
  if (!node_) return;
  if (node_->op == SymOp::kDim) return f(node_->value, node_->dim);
  node_->a.for_each_leaf(f);
  node_->b.for_each_leaf(f);
}

SymInt SymInt::map_leaves(
    const std::function<SymInt(int value, int dim, const SymInt& leaf)>& replace) const {
  if (!node_) return *this;
  if (node_->op == SymOp::kDim) return replace(node_->value, node_->dim, *this);
  return sym_binary(node_->op, node_->a.map_leaves(replace), node_->b.map_leaves(replace));
}

std::string SymInt::format() const {
  return format([](int value, int dim) { return fmt::format("size(%{}, {})", value, dim); });
}

std::string SymInt::format(const std::function<std::string(int value, int dim)>& leaf) const {
  if (!node_) return std::to_string(hint_);
  if (node_->op == SymOp::kDim) return leaf(node_->value, node_->dim);
  const OpInfo& i = info(node_->op);
  if (*i.symbol == '\0')
    return fmt::format("{}({}, {})", i.name, node_->a.format(leaf), node_->b.format(leaf));
  // C++'s precedence: * / % bind tighter than + -, and each is left-associative.
  auto precedence = [](SymOp op) {
    return op == SymOp::kAdd || op == SymOp::kSub ? 1 : op == SymOp::kDim ? 3 : 2;
  };
  const int mine = precedence(node_->op);
  auto operand = [&](const SymInt& s, bool right) {
    const bool infix = s.node_ && s.node_->op != SymOp::kDim && *info(s.node_->op).symbol;
    const int theirs = infix ? precedence(s.node_->op) : 3;
    return theirs < mine || (right && theirs == mine) ? "(" + s.format(leaf) + ")" : s.format(leaf);
  };
  return fmt::format("{} {} {}", operand(node_->a, false), i.symbol, operand(node_->b, true));
}

nlohmann::json SymInt::to_json() const {
  if (!node_) return hint_;
  if (node_->op == SymOp::kDim) return {{"dim", {node_->value, node_->dim}}};
  return {{info(node_->op).name, {node_->a.to_json(), node_->b.to_json()}}};
}

SymInt SymInt::from_json(const nlohmann::json& j, const std::string& where) {
  if (j.is_number_integer()) return SymInt(j.get<int64_t>());
  auto bad = [&](const std::string& what) -> SymInt {
    throw Error(fmt::format("[SymInt] {} {}: {}", where, what, j.dump()));
  };
  if (!j.is_object() || j.size() != 1) return bad("is not a size expression");
  const std::string key = j.begin().key();
  const nlohmann::json& args = j.begin().value();
  if (!args.is_array() || args.size() != 2) return bad("expects two operands");
  if (key == "dim") {
    if (!args[0].is_number_integer() || !args[1].is_number_integer())
      return bad("expects [value, dim] integers");
    const int64_t v = args[0].get<int64_t>(), d = args[1].get<int64_t>();
    if (v < 0 || d < 0 || v > INT32_MAX || d > INT32_MAX) return bad("has an out-of-range leaf");
    // The hint of a loaded leaf is unknown until a call binds it.
    return dim_of(static_cast<int>(v), static_cast<int>(d), 0);
  }
  for (const OpInfo& i : kOps)
    if (key == i.name) {
      SymInt a = from_json(args[0], where), b = from_json(args[1], where);
      auto node = std::make_shared<SymNode>();
      node->op = i.op;
      node->a = std::move(a);
      node->b = std::move(b);
      return SymInt(0, std::move(node));
    }
  return bad("has the unknown operation '" + key + "'");
}

bool SymInt::same_expression(const SymInt& other) const {
  if (!node_ || !other.node_) return !node_ && !other.node_ && hint_ == other.hint_;
  if (node_->op != other.node_->op) return false;
  if (node_->op == SymOp::kDim)
    return node_->value == other.node_->value && node_->dim == other.node_->dim;
  return node_->a.same_expression(other.node_->a) && node_->b.same_expression(other.node_->b);
}

std::vector<int64_t> hints_of(const SymSizes& sizes) {
  std::vector<int64_t> out;
  out.reserve(sizes.size());
  for (const SymInt& s : sizes) out.push_back(s.hint());
  return out;
}

bool any_symbolic(const SymSizes& sizes) {
  return std::any_of(sizes.begin(), sizes.end(), [](const SymInt& s) { return s.is_symbolic(); });
}

void add_sym_attrs(SymAttrs& out, const std::string& path, const SymSizes& sizes) {
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i].is_symbolic()) out.push_back({fmt::format("{}/{}", path, i), sizes[i]});
}

namespace {
thread_local detail::SymSizeHook size_hook = nullptr;
thread_local detail::SymGuardHook guard_hook = nullptr;
thread_local detail::SymUsableHook usable_hook = nullptr;
}  // namespace

const char* sym_compare_name(SymCompare c) {
  switch (c) {
    case SymCompare::kEq:
      return "==";
    case SymCompare::kNe:
      return "!=";
    case SymCompare::kLt:
      return "<";
    case SymCompare::kLe:
      return "<=";
    case SymCompare::kGt:
      return ">";
    case SymCompare::kGe:
      return ">=";
  }
  return "?";
}

bool sym_compare_apply(SymCompare c, int64_t a, int64_t b) {
  switch (c) {
    case SymCompare::kEq:
      return a == b;
    case SymCompare::kNe:
      return a != b;
    case SymCompare::kLt:
      return a < b;
    case SymCompare::kLe:
      return a <= b;
    case SymCompare::kGt:
      return a > b;
    case SymCompare::kGe:
      return a >= b;
  }
  return false;
}

std::string SymGuard::format() const {
  return fmt::format("{} {} {}", a.format(), sym_compare_name(compare), b.format());
}

bool sym_compare(SymCompare c, const SymInt& a, const SymInt& b) {
  const bool result = sym_compare_apply(c, a.hint(), b.hint());
  if ((a.is_symbolic() || b.is_symbolic()) && guard_hook)
    guard_hook(
        SymGuard{c, a, b, result, describe_call_site(std::source_location::current()), false});
  return result;
}

// Note [size guards]: a symbolic size becoming a number is the guard that it is that number.
int64_t SymInt::converted() const {
  if (guard_hook)
    guard_hook(SymGuard{SymCompare::kEq, *this, SymInt(hint_), true,
                        describe_call_site(std::source_location::current()), true});
  return hint_;
}

#define KILN_SYM_COMPARE_WITH(op, kind, T)  \
  bool operator op(const SymInt& a, T b) {  \
    return sym_compare(kind, a, SymInt(b)); \
  }                                         \
  bool operator op(T a, const SymInt& b) {  \
    return sym_compare(kind, SymInt(a), b); \
  }
#define KILN_SYM_COMPARE(op, kind)                     \
  bool operator op(const SymInt& a, const SymInt& b) { \
    return sym_compare(kind, a, b);                    \
  }                                                    \
  KILN_SYM_COMPARE_WITH(op, kind, int)                 \
  KILN_SYM_COMPARE_WITH(op, kind, long)                \
  KILN_SYM_COMPARE_WITH(op, kind, long long)           \
  KILN_SYM_COMPARE_WITH(op, kind, unsigned)            \
  KILN_SYM_COMPARE_WITH(op, kind, unsigned long)       \
  KILN_SYM_COMPARE_WITH(op, kind, unsigned long long)
KILN_SYM_COMPARE(==, SymCompare::kEq)
KILN_SYM_COMPARE(!=, SymCompare::kNe)
KILN_SYM_COMPARE(<, SymCompare::kLt)
KILN_SYM_COMPARE(<=, SymCompare::kLe)
KILN_SYM_COMPARE(>, SymCompare::kGt)
KILN_SYM_COMPARE(>=, SymCompare::kGe)
#undef KILN_SYM_COMPARE
#undef KILN_SYM_COMPARE_WITH

SymInt sym_size(const Tensor& t, int64_t dim) {
  const int64_t d = wrap_dim(dim, t.dim(), "size");
  const int64_t size = t.shape()[static_cast<size_t>(d)];
  return size_hook ? size_hook(t, d, size) : SymInt(size);
}

SymSizes sym_sizes(const Tensor& t) {
  SymSizes out;
  out.reserve(t.shape().size());
  for (int64_t d = 0; d < t.dim(); ++d) out.push_back(sym_size(t, d));
  return out;
}

namespace detail {
SymSizeHook set_sym_size_hook(SymSizeHook hook) {
  return std::exchange(size_hook, hook);
}
SymGuardHook set_sym_guard_hook(SymGuardHook hook) {
  return std::exchange(guard_hook, hook);
}
void record_sym_guard(SymGuard guard) {
  if (guard_hook) guard_hook(std::move(guard));
}
bool sizes_are_traced() {
  return size_hook != nullptr;
}
SymUsableHook set_sym_usable_hook(SymUsableHook hook) {
  return std::exchange(usable_hook, hook);
}
bool sym_usable(const SymInt& s) {
  return !s.is_symbolic() || (usable_hook != nullptr && usable_hook(s));
}
}  // namespace detail

namespace {
struct Pending {
  std::string op;
  SymAttrs attrs;
};
// A stack: an op's implementation may declare the attrs of an inner op before its own is called.
thread_local std::vector<Pending> pending;
}  // namespace

SymAttrScope::SymAttrScope(std::string_view op, SymAttrs attrs) {
  if (attrs.empty()) return;
  pending.push_back({std::string(op), std::move(attrs)});
  active_ = true;
}

SymAttrScope::~SymAttrScope() {
  if (active_) pending.pop_back();
}

namespace detail {
SymAttrs take_sym_attrs(std::string_view op) {
  if (pending.empty() || pending.back().op != op) return {};
  return std::exchange(pending.back().attrs, {});
}
}  // namespace detail

}  // namespace kiln
