// Conv2dOptions and the forward ops' policy as op attributes, and back; every bad value is an
// error naming the op and the attribute (resolve_conv_policy, which reads grad mode at call time,
// is in conv.cpp beside the public functions).
#include "kiln/ops/conv_attrs.h"

#include <fmt/format.h>

#include <string>

namespace kiln {
namespace detail {

const char* conv_algorithm_name(ConvAlgorithm a) {
  switch (a) {
    case ConvAlgorithm::kAuto:
      return "auto";
    case ConvAlgorithm::kDirect:
      return "direct";
    case ConvAlgorithm::kWinograd:
      return "winograd";
  }
  return "?";
}

const char* conv_purpose_name(ConvPurpose p) {
  return p == ConvPurpose::kInference ? "inference" : "training";
}

nlohmann::json conv_attrs(const Conv2dOptions& o) {
  nlohmann::json padding;
  if (o.padding.kind == Padding::Kind::kExplicit)
    padding = {o.padding.top, o.padding.bottom, o.padding.left, o.padding.right};
  else
    padding = o.padding.str();
  return {{"stride", {o.stride.h, o.stride.w}},
          {"padding", padding},
          {"dilation", {o.dilation.h, o.dilation.w}},
          {"groups", o.groups},
          {"algorithm", conv_algorithm_name(o.algorithm)}};
}

nlohmann::json conv_forward_attrs(const Conv2dOptions& o, ConvPurpose purpose) {
  nlohmann::json a = conv_attrs(o);
  a["purpose"] = conv_purpose_name(purpose);
  return a;
}

Conv2dOptions conv_options_from_attrs(const Attrs& a) {
  auto pair = [&](const char* key) {
    std::vector<int64_t> v = a.ints(key);
    if (v.size() != 2) a.fail(key, "must hold 2 integers (h, w)");
    return Size2(v[0], v[1]);
  };
  Conv2dOptions o;
  o.stride = pair("stride");
  o.dilation = pair("dilation");
  o.groups = a.i("groups");
  if (a.at("padding").is_string()) {
    o.padding = Padding(a.s("padding"));
  } else {
    std::vector<int64_t> p = a.ints("padding");
    if (p.size() != 4)
      a.fail("padding", "must be a string or 4 integers [top, bottom, left, right]");
    o.padding = Padding::asymmetric(p[0], p[1], p[2], p[3]);
  }
  const std::string algorithm = a.s("algorithm");
  if (algorithm == "auto")
    o.algorithm = ConvAlgorithm::kAuto;
  else if (algorithm == "direct")
    o.algorithm = ConvAlgorithm::kDirect;
  else if (algorithm == "winograd")
    o.algorithm = ConvAlgorithm::kWinograd;
  else
    a.fail("algorithm",
           fmt::format("must be \"auto\", \"direct\" or \"winograd\", but is \"{}\"", algorithm));
  return o;
}

// No "auto" purpose: an op holds the decision its public function made (Note [conv algorithm]).
ConvPolicy conv_policy_from_attrs(const Attrs& a) {
  ConvPolicy p{conv_options_from_attrs(a).algorithm, ConvPurpose::kTraining};
  const std::string purpose = a.s("purpose");
  if (purpose == "inference")
    p.purpose = ConvPurpose::kInference;
  else if (purpose != "training")
    a.fail("purpose", fmt::format("must be \"training\" or \"inference\", but is \"{}\"", purpose));
  return p;
}

}  // namespace detail
}  // namespace kiln
