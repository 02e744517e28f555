#pragma once
#include <string>

namespace kiln {

// cpu: real memory. meta: shapes and dtypes only; ops on meta tensors run inference and no kernel
// (graph tracing and memory planning use this).
enum class DeviceType : uint8_t { CPU, Meta };

struct Device {
  DeviceType type = DeviceType::CPU;
  bool operator==(const Device&) const = default;
  bool is_meta() const { return type == DeviceType::Meta; }
  const char* name() const { return type == DeviceType::CPU ? "cpu" : "meta"; }
};

inline constexpr Device kCPU{DeviceType::CPU};
inline constexpr Device kMeta{DeviceType::Meta};

}  // namespace kiln
