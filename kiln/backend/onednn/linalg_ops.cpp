// bmm's CPU kernel in the kernel table (Note [kernel table]): float32 and the 16-bit floats on
// oneDNN's matmul (bmm_kernel.cpp; AVX512-BF16 / AMX kernels for bfloat16), float64 on kiln's loop
// (kiln/backend/cpu/bmm_f64.cpp). A 16-bit product this CPU has no oneDNN kernel for is computed
// in float32 and rounded once, which is what the native kernels' float32 accumulation gives too.
// The definition (infer, vjp) is in kiln/ops/linalg.cpp.
#include <cstring>
#include <vector>

#include "kiln/backend/cpu/bmm_f64.h"
#include "kiln/backend/cpu/dense.h"
#include "kiln/backend/cpu/loops.h"
#include "kiln/backend/onednn/bmm_kernel.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

// Inputs: a [B, M, K], b [B, K, N]; output [B, M, N], contiguous.
void bmm_kernel(const Op&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const Tensor &a = in[0], &b = in[1], &o = out[0];
  if (o.numel() == 0) return;
  if (a.dim_size(2) == 0) {
    std::memset(o.raw_data(), 0, o.nbytes());
    return;
  }
  if (a.dtype() == DType::Float64) {
    detail::bmm_f64_kernel(a, b, o);
  } else if (!detail::onednn_bmm(a, b, o)) {
    Tensor o32 = empty(o.shape(), {DType::Float32});
    detail::onednn_bmm(detail::dense(a, DType::Float32), detail::dense(b, DType::Float32), o32);
    copy_into(o, o32);
  }
}

KILN_REGISTER_KERNEL("bmm", DeviceType::CPU, bmm_kernel);

}  // namespace

}  // namespace kiln
