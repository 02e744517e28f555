#include "kiln/backend/onednn/dnnl_utils.h"

namespace kiln {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

std::optional<dnnl::memory::data_type> dnnl_dtype(DType dt) {
  using dnnl_dt = dnnl::memory::data_type;
  switch (dt) {
    case DType::Float32:
      return dnnl_dt::f32;
    case DType::Float16:
      return dnnl_dt::f16;
    case DType::BFloat16:
      return dnnl_dt::bf16;
    case DType::Int32:
      return dnnl_dt::s32;
    case DType::Int8:
      return dnnl_dt::s8;
    case DType::UInt8:
      return dnnl_dt::u8;
    default:
      return std::nullopt;
  }
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

Tensor scratchpad_for(const dnnl::memory::desc& md) {
  const size_t bytes = md.get_size();
  if (bytes == 0) return Tensor();
  return empty({static_cast<int64_t>((bytes + 7) / 8)}, {DType::Float64});
}

}  // namespace kiln
