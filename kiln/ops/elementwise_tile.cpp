#include "kiln/ops/elementwise_tile.h"

#include <map>
#include <mutex>
#include <utility>

namespace kiln {

namespace {

struct Tiles {
  std::mutex mutex;
  std::map<std::pair<std::string, DeviceType>, TileMaker> makers;
};
Tiles& tiles() {
  static auto* t = new Tiles();  // never destroyed, as the kernel table
  return *t;
}

}  // namespace

bool register_elementwise_tile(const char* op_name, DeviceType device, TileMaker make) {
  Tiles& t = tiles();
  std::lock_guard<std::mutex> lock(t.mutex);
  const bool inserted = t.makers.emplace(std::make_pair(std::string(op_name), device), make).second;
  KILN_INTERNAL_ASSERT(inserted,
                       std::string("two elementwise tiles registered for op '") + op_name + "'");
  return true;
}

TileMaker find_elementwise_tile(const std::string& op_name, DeviceType device) {
  Tiles& t = tiles();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.makers.find({op_name, device});
  return it == t.makers.end() ? nullptr : it->second;
}

bool has_elementwise_tile(const std::string& op_name, DeviceType device) {
  return find_elementwise_tile(op_name, device) != nullptr;
}

std::vector<std::string> ops_with_elementwise_tiles(DeviceType device) {
  Tiles& t = tiles();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<std::string> names;
  for (const auto& [key, make] : t.makers)
    if (key.second == device) names.push_back(key.first);
  return names;
}

}  // namespace kiln
