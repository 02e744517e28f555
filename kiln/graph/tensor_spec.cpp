#include "kiln/graph/tensor_spec.h"

#include <fmt/format.h>

namespace kiln::graph {

TensorSpec::TensorSpec(std::initializer_list<DimSpec> dims, DType dtype_, std::string name_)
    : dtype(dtype_), name(std::move(name_)) {
  for (const DimSpec& d : dims) {
    if (!d.dim.is_symbolic() && d.dim.size < 0)
      throw Error(
          fmt::format("[TensorSpec] dim {} is negative ({}); use a symbol such as "
                      "\"batch\" for a size that varies",
                      shape.size(), d.dim.size));
    shape.push_back(d.dim);
  }
}

TensorSpec::TensorSpec(SymShape shape_, DType dtype_, std::string name_)
    : shape(std::move(shape_)), dtype(dtype_), name(std::move(name_)) {}

std::string TensorSpec::describe() const {
  return fmt::format("{}{}{}", name.empty() ? "" : name + ": ", dtype_name(dtype),
                     format_shape(shape));
}

}  // namespace kiln::graph
