#include "kiln/ops/kernel_table.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace kiln {

namespace {

struct Table {
  std::mutex mutex;
  std::map<std::pair<std::string, DeviceType>, KernelFn> kernels;
};
Table& table() {
  static auto* t = new Table();  // never destroyed: ops may run during static destruction
  return *t;
}

}  // namespace

bool register_kernel(const char* op_name, DeviceType device, KernelFn fn) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  const bool inserted = t.kernels.emplace(std::make_pair(std::string(op_name), device), fn).second;
  KILN_INTERNAL_ASSERT(
      inserted, std::string("two kernels registered for op '") + op_name + "' on one device");
  return true;
}

KernelFn find_kernel(const Op& op, DeviceType device) {
  // An op's name() is one string literal per class, so this thread remembers the answer by the
  // literal's address and the common case takes no lock and compares no strings.
  thread_local std::unordered_map<const void*, KernelFn> cache[2];
  auto& by_name = cache[device == DeviceType::CPU ? 0 : 1];
  const char* name = op.name();
  if (auto it = by_name.find(name); it != by_name.end()) return it->second;
  Table& t = table();
  KernelFn fn = nullptr;
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    auto it = t.kernels.find({std::string(name), device});
    if (it != t.kernels.end()) fn = it->second;
  }
  by_name.emplace(name, fn);
  return fn;
}

std::vector<std::string> ops_with_kernels(DeviceType device) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<std::string> names;
  for (const auto& [key, fn] : t.kernels)
    if (key.second == device) names.push_back(key.first);
  return names;
}

}  // namespace kiln
