#pragma once
#include <initializer_list>
#include <string_view>

#include "kiln/core/shape.h"
#include "kiln/core/sym_int.h"

namespace kiln {

// Note [size lists]
// ~~~~~~~~~~~~~~~~~
// The one parameter type of kiln's shape-taking APIs (reshape, view, expand, the factories): a
// list of sizes written as integers, SymInts or a mix — `x.view({x.size(0), -1})`, a Shape
// variable, a SymSizes from `x.sizes()`. It holds the sizes as numbers (the hints) for the op to
// use, and, only when some element is symbolic, the SymInts too, which the API declares as
// symbolic attrs of the op it dispatches (Note [symbolic attrs]). One type rather than an overload
// beside Shape, so that a braced list is never ambiguous; in eager code it is a Shape and nothing
// more.
class SizeList {
 public:
  SizeList() = default;
  SizeList(Shape sizes) : sizes_(std::move(sizes)) {}  // NOLINT: a Shape is a size list
  SizeList(const SymSizes& sizes);                     // NOLINT
  SizeList(std::initializer_list<SymInt> sizes);       // NOLINT

  // The sizes as numbers (a symbolic one at the traced sizes).
  const Shape& sizes() const { return sizes_; }
  Shape take() { return std::move(sizes_); }
  bool is_symbolic() const { return !symbolic_.empty(); }
  // The symbolic elements as attrs under `path` ("/shape" -> "/shape/0", ...); empty when none.
  SymAttrs sym_attrs(std::string_view path) const;

 private:
  Shape sizes_;
  SymSizes symbolic_;  // every element, when one of them is symbolic; else empty
};

}  // namespace kiln
