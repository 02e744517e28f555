#include "kiln/backend/onednn/cpu_isa.h"

#include <oneapi/dnnl/dnnl.hpp>

#include "kiln/ops/autocast.h"

namespace kiln {

namespace {
// dnnl_cpu_isa_t values are bit sets: each set includes the bits of the ones it extends.
bool has_isa(unsigned isa, unsigned wanted) {
  return (isa & wanted) == wanted;
}
unsigned effective_isa() {
  return static_cast<unsigned>(dnnl::get_effective_cpu_isa());
}
}  // namespace

std::string onednn_cpu_isa() {
  const unsigned isa = effective_isa();
  // Most capable first.
  if (has_isa(isa, dnnl_cpu_isa_avx512_core_amx)) return "avx512_core_amx";
  if (has_isa(isa, dnnl_cpu_isa_avx512_core_bf16)) return "avx512_core_bf16";
  if (has_isa(isa, dnnl_cpu_isa_avx512_core_vnni)) return "avx512_core_vnni";
  if (has_isa(isa, dnnl_cpu_isa_avx512_core)) return "avx512_core";
  if (has_isa(isa, dnnl_cpu_isa_avx2_vnni)) return "avx2_vnni";
  if (has_isa(isa, dnnl_cpu_isa_avx2)) return "avx2";
  if (has_isa(isa, dnnl_cpu_isa_avx)) return "avx";
  if (has_isa(isa, dnnl_cpu_isa_sse41)) return "sse41";
  return "default";
}

bool onednn_native_low_precision(DType dtype) {
  return dtype == DType::BFloat16 && has_isa(effective_isa(), dnnl_cpu_isa_avx512_core_bf16);
}

bool onednn_exact_int8() {
  const unsigned isa = effective_isa();
  return has_isa(isa, dnnl_cpu_isa_avx512_core_vnni) || has_isa(isa, dnnl_cpu_isa_avx2_vnni);
}

namespace {
const bool registered = (detail::set_native_low_precision_query(onednn_native_low_precision), true);
}  // namespace

}  // namespace kiln
