#include "kiln/io/fault_injection.h"

namespace kiln::io {

void FaultPoint::set(FaultHook hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  hook_ = std::move(hook);
}

int FaultPoint::check(std::string_view step, const std::string& path) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hook_ ? hook_(step, path) : 0;
}

}  // namespace kiln::io
