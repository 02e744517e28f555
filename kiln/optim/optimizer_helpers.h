#pragma once
// Private helpers of the optimizer classes (sgd.cpp, adam.cpp, rmsprop.cpp, adagrad.cpp): their
// option checks and fresh state. The update ops they dispatch are kiln/ops/optimizer_update.h.
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::optim::detail {

// A constant tensor shaped and typed like `param`, contiguous: fresh optimizer state.
Tensor zeros_state(const Tensor& param, double value = 0.0);

// Option checks shared by the optimizers' validate(); the errors quote PyTorch's constraints.
double option_number(const nlohmann::json& options, const std::string& key, const std::string& op,
                     const Loc& loc);
bool option_flag(const nlohmann::json& options, const std::string& key, const std::string& op,
                 const Loc& loc);
// Requires options[key] >= 0.
double option_nonnegative(const nlohmann::json& options, const std::string& key,
                          const std::string& op, const Loc& loc);

}  // namespace kiln::optim::detail
