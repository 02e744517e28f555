#pragma once
// What oneDNN found this CPU can do: the instruction set its kernels use, and whether that set has
// native 16-bit floating-point arithmetic. Reported beside every low-precision figure (the
// head-to-head harness, the profiler) and behind has_native_low_precision (kiln/ops/autocast.h).
#include <string>

#include "kiln/core/dtype.h"

namespace kiln {

// oneDNN's name for the instruction set it dispatches to, as ONEDNN_VERBOSE would say it:
// "avx2", "avx512_core", "avx512_core_bf16", "avx512_core_amx", ...
std::string onednn_cpu_isa();

// bfloat16: AVX512-BF16 (vdpbf16ps) or AMX tiles. float16: never (oneDNN 2.6 has no CPU float16
// kernels; its float16 primitives are the reference ones).
bool onednn_native_low_precision(DType dtype);

}  // namespace kiln
