#include "kiln/ops/kernel_table.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
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

// Note [kernel lookup cache]: every eager op call looks its kernel up, so the answer is cached
// by the address of the op's name (one string literal per op class) in a fixed open-addressing
// table that readers probe without a lock: a slot's kernel is stored before its key is
// published (release), and a reader that sees the key (acquire) sees the kernel. Writers take the
// table's mutex. A thread_local map did the same but cost a TLS lookup per call from inside the
// shared library (__tls_get_addr), which the eager add benchmark showed.
namespace {

struct CacheSlot {
  std::atomic<const void*> key{nullptr};
  std::atomic<KernelFn> fn{nullptr};
};
constexpr size_t kCacheBits = 10;  // 1024 slots per device: a few hundred op names fit sparsely
constexpr size_t kCacheSlots = size_t{1} << kCacheBits;
CacheSlot lookup_cache[2][kCacheSlots];

size_t slot_of(const void* name) {
  return static_cast<size_t>((reinterpret_cast<uintptr_t>(name) * 0x9E3779B97F4A7C15ull) >>
                             (64 - kCacheBits));
}

}  // namespace

KernelFn find_kernel(const Op& op, DeviceType device) {
  CacheSlot* slots = lookup_cache[device == DeviceType::CPU ? 0 : 1];
  const char* name = op.name();
  const size_t home = slot_of(name);
  for (size_t i = 0; i < kCacheSlots; ++i) {
    CacheSlot& slot = slots[(home + i) & (kCacheSlots - 1)];
    const void* key = slot.key.load(std::memory_order_acquire);
    if (key == name) return slot.fn.load(std::memory_order_relaxed);
    if (key == nullptr) break;
  }
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  KernelFn fn = nullptr;
  if (auto it = t.kernels.find({std::string(name), device}); it != t.kernels.end()) fn = it->second;
  for (size_t i = 0; i < kCacheSlots; ++i) {
    CacheSlot& slot = slots[(home + i) & (kCacheSlots - 1)];
    const void* key = slot.key.load(std::memory_order_relaxed);
    if (key == name) break;  // another thread cached it meanwhile
    if (key == nullptr) {
      slot.fn.store(fn, std::memory_order_relaxed);
      slot.key.store(name, std::memory_order_release);
      break;
    }
  }  // a full cache only means later lookups of this name take the slow path
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
