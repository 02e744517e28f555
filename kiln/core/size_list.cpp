#include "kiln/core/size_list.h"

#include <string>

namespace kiln {

SizeList::SizeList(const SymSizes& sizes) {
  sizes_.reserve(sizes.size());
  for (const SymInt& s : sizes) sizes_.push_back(s.hint());
  if (any_symbolic(sizes)) symbolic_ = sizes;
}

SizeList::SizeList(std::initializer_list<SymInt> sizes) {
  sizes_.reserve(sizes.size());
  bool symbolic = false;
  for (const SymInt& s : sizes) {
    sizes_.push_back(s.hint());
    symbolic = symbolic || s.is_symbolic();
  }
  if (symbolic) symbolic_.assign(sizes.begin(), sizes.end());
}

SymAttrs SizeList::sym_attrs(std::string_view path) const {
  SymAttrs out;
  if (!symbolic_.empty()) add_sym_attrs(out, std::string(path), symbolic_);
  return out;
}

}  // namespace kiln
