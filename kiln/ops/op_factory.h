#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kiln/ops/autocast_policy.h"
#include "kiln/ops/op.h"

namespace kiln {

// Note [op factory]
// ~~~~~~~~~~~~~~~~~
// Every op is registered under a unique name with a factory that rebuilds it from its attrs()
// (the constructor's arguments as JSON), and with its schema: the names of its inputs and
// outputs. A graph, a saved-model bundle or an ONNX importer stores (name, attrs) and gets the
// same op back with make_op; the registry test rebuilds every op the samples dispatch and checks
// that it computes bit-identical results. attrs() must therefore hold everything the op needs:
// no call site (kernels read kernel_call_site()), no pointers, no hidden caches. Two ops with the
// same name and attrs are interchangeable (op_equivalent), which is what CSE keys on.
//
// Attribute values are JSON numbers, strings, bools, null (an absent optional) and arrays of
// them; a non-finite double is written as the string "nan", "inf" or "-inf" (attr_double), as
// JSON has no such numbers.

// Reads attributes back; every error names the op and the attribute.
class Attrs {
 public:
  Attrs(std::string op, const nlohmann::json& attrs);
  const std::string& op() const { return op_; }
  const nlohmann::json& json() const { return attrs_; }
  bool has(const char* key) const;
  const nlohmann::json& at(const char* key) const;
  int64_t i(const char* key) const;
  uint64_t u64(const char* key) const;  // seeds and stream offsets
  double f(const char* key) const;
  bool b(const char* key) const;
  std::string s(const char* key) const;
  std::vector<int64_t> ints(const char* key) const;
  std::optional<int64_t> opt_i(const char* key) const;  // null reads as nullopt
  std::optional<double> opt_f(const char* key) const;
  DType dtype(const char* key) const;
  [[noreturn]] void fail(const char* key, const std::string& what) const;

 private:
  std::string op_;
  const nlohmann::json& attrs_;
};

nlohmann::json attr_double(double v);
nlohmann::json attr_optional(const std::optional<double>& v);
nlohmann::json attr_optional(const std::optional<int64_t>& v);

// Input and output names; an input name ending in "?" may be absent (only at the end), and one
// ending in "..." takes any number of tensors (cat's inputs).
struct OpSchema {
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  // How the op runs inside an autocast region (Note [autocast policy]); every op declares one.
  AutocastPolicy autocast = AutocastPolicy::kUndeclared;
  // Under kLowPrecision, the inputs named here are cast to float32 instead of the region's dtype
  // (a fused normalization's per-channel scale and shift: Note [autocast policy]).
  std::vector<std::string> float32_inputs = {};
  // Whether n inputs (outputs) fit the schema.
  bool accepts_inputs(size_t n) const;
  bool accepts_outputs(size_t n) const;
  std::string describe() const;  // "(input, weight, bias?) -> (output)"
};

using OpFactory = std::function<OpPtr(const Attrs&)>;
struct OpDefinition {
  std::string name;
  OpSchema schema;
  OpFactory factory;
};

// Registers an op (at load time, from the op's own file). A second registration under a name is
// kept aside and reported by duplicate_op_names(), which a test checks is empty.
bool register_op(OpDefinition def);
// Rebuilds an op; an unknown name or a missing or mistyped attribute is a kiln::Error.
OpPtr make_op(const std::string& name, const nlohmann::json& attrs);
const OpDefinition* find_op_definition(const std::string& name);
std::vector<std::string> registered_op_names();  // sorted
std::vector<std::string> duplicate_op_names();

// Identity for common-subexpression elimination: same name and same attrs.
bool op_equivalent(const Op& a, const Op& b);
uint64_t op_hash(const Op& op);

// The factory of an op without attributes.
template <class O>
OpFactory no_attrs() {
  return [](const Attrs&) -> OpPtr { return std::make_shared<const O>(); };
}

// KILN_REGISTER_OP("gather", (OpSchema{{"x", "index"}, {"y"}}),
//                  [](const Attrs& a) { return std::make_shared<GatherOp>(a.i("dim")); });
#define KILN_REGISTER_OP(name, schema, ...)                      \
  static const bool KILN_OP_CONCAT(kiln_op_defined_, __LINE__) = \
      ::kiln::register_op(::kiln::OpDefinition{name, schema, __VA_ARGS__})
#define KILN_OP_CONCAT_INNER(a, b) a##b
#define KILN_OP_CONCAT(a, b) KILN_OP_CONCAT_INNER(a, b)

}  // namespace kiln
