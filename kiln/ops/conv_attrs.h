#pragma once
// The convolution ops' attributes: Conv2dOptions written to and read from JSON (Note [op factory]),
// and the explicit algorithm policy a forward convolution op holds (Note [conv algorithm] in
// conv.h).
#include <nlohmann/json.hpp>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/op_factory.h"

namespace kiln {
namespace detail {

// What a forward convolution was resolved for at call time (Note [conv algorithm]).
enum class ConvPurpose { kTraining, kInference };

// The explicit decision a forward convolution op holds in its attributes and its kernel reads:
// the caller's algorithm policy and the call's purpose.
struct ConvPolicy {
  ConvAlgorithm algorithm = ConvAlgorithm::kAuto;
  ConvPurpose purpose = ConvPurpose::kTraining;
  bool inference() const { return purpose == ConvPurpose::kInference; }
};

// The policy of a call with these inputs, resolved now: training when a gradient is recorded for
// it (grad mode on and an input requires grad), else inference. Only the public functions call
// this; kernels never look at grad mode.
ConvPolicy resolve_conv_policy(ConvAlgorithm algorithm, const std::vector<Tensor>& inputs);

// "auto", "direct", "winograd"; "training", "inference".
const char* conv_algorithm_name(ConvAlgorithm a);
const char* conv_purpose_name(ConvPurpose p);

// The op attributes: stride, padding ("same", "valid" or [top, bottom, left, right]), dilation,
// groups, algorithm ("auto", "direct" or "winograd").
nlohmann::json conv_attrs(const Conv2dOptions& o);
// Reads them back (Note [op factory]).
Conv2dOptions conv_options_from_attrs(const Attrs& a);
// conv_attrs plus the forward ops' "purpose" ("training" or "inference"); the policy in them.
nlohmann::json conv_forward_attrs(const Conv2dOptions& o, ConvPurpose purpose);
ConvPolicy conv_policy_from_attrs(const Attrs& a);

}  // namespace detail
}  // namespace kiln
