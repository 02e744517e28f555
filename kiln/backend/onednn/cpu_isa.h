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

// Whether oneDNN's int8 kernels compute the exact int32 sums of uint8/int8 x int8 products: with
// VNNI (vpdpbusd) or AMX. Without them they use vpmaddubsw, whose 16-bit intermediate sums would
// overflow, so oneDNN halves the weights first (Note [int8 quantization] in kiln/ops/quantize.h).
bool onednn_exact_int8();

}  // namespace kiln
