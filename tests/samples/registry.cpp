#include "tests/samples/registry.h"

#include <algorithm>

namespace kiln {

namespace {

struct Registry {
  std::vector<OpInfo> ops;
  std::vector<std::string> families;  // families[i] is the op file ops[i] belongs to
};

Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

// The op file a registration belongs to: its folder and file name, with a sample file's
// "_samples" dropped: ".../kiln/ops/conv.cpp" and ".../tests/samples/ops/conv_samples.cpp" are
// both "ops/conv.cpp" (however the compiler spells the path: absolute, or relative under ccache).
std::string family_of(std::string_view file) {
  const size_t name = file.rfind('/');
  const size_t dir = name == std::string_view::npos || name == 0 ? std::string_view::npos
                                                                 : file.rfind('/', name - 1);
  std::string family(file.substr(dir == std::string_view::npos ? 0 : dir + 1));
  const std::string_view suffix = "_samples.cpp";
  if (family.ends_with(suffix))
    family.replace(family.size() - suffix.size(), suffix.size(), ".cpp");
  return family;
}

}  // namespace

bool register_op_info(OpInfo info, std::string_view source_file) {
  Registry& r = registry();
  std::string family = family_of(source_file);
  // After every op of an earlier or the same family: a file's ops keep their declaration order.
  const auto at = std::upper_bound(r.families.begin(), r.families.end(), family);
  const auto i = at - r.families.begin();
  r.families.insert(at, std::move(family));
  r.ops.insert(r.ops.begin() + i, std::move(info));
  return true;
}

const std::vector<OpInfo>& registered_ops() {
  return registry().ops;
}

}  // namespace kiln
