#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kiln/core/dtype.h"
#include "kiln/graph/graph.h"

namespace kiln::graph {

// One entry of a shape in a signature: a static size or a symbol name.
struct DimSpec {
  DimSpec(int64_t size) : dim{size, ""} {}  // NOLINT: implicit, so {"batch", 1, 28} reads well
  DimSpec(int size) : dim{size, ""} {}      // NOLINT
  DimSpec(const char* symbol) : dim{0, symbol} {}             // NOLINT
  DimSpec(std::string symbol) : dim{0, std::move(symbol)} {}  // NOLINT
  Dim dim;
};

// What a function's input must look like: TensorSpec({"batch", 1, 28, 28}, DType::Float32, "x").
// A symbolic dim accepts any size (0 and 1 too); the same symbol in two inputs must have the same
// size in a call.
struct TensorSpec {
  TensorSpec(std::initializer_list<DimSpec> dims, DType dtype = DType::Float32,
             std::string name = "");
  TensorSpec(SymShape shape, DType dtype, std::string name = "");
  SymShape shape;
  DType dtype = DType::Float32;
  std::string name;
  std::string describe() const;  // "x: float32[batch, 1, 28, 28]"
};

}  // namespace kiln::graph
