#include "kiln/ops/registry.h"

namespace kiln {

namespace {
std::vector<OpInfo>& registry() {
  static auto* r = new std::vector<OpInfo>();
  return *r;
}
}  // namespace

bool register_op_info(OpInfo info) {
  registry().push_back(std::move(info));
  return true;
}

const std::vector<OpInfo>& registered_ops() {
  return registry();
}

}  // namespace kiln
