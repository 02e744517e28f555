// bmm's float64 loop: register tiles of 4 x 8 outputs, panels of rows split across threads.
#include "kiln/backend/cpu/bmm_f64.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/backend/cpu/dense.h"
#include "kiln/core/parallel.h"

namespace kiln::detail {

namespace {

// Note [bmm loop]: oneDNN has no float64 matmul, so float64 runs this loop. Each 4 x 8 tile of
// the output is accumulated in registers (GCC/Clang vector extensions: 8 AVX2 registers) over k
// in ascending order, so every element is summed in the same order whatever the thread count
// (threads only split panels of rows). A panel of 64 rows walks the columns in steps of 8, so the
// K x 8 slice of b it reads stays in cache while the panel's 16 row tiles use it.
constexpr int64_t kTileRows = 4, kTileCols = 8, kPanelRows = 64;
using Vec4d = double __attribute__((vector_size(32)));

struct GemmF64 {
  const double* a;
  int64_t sam, sak;  // a's row and k strides
  const double* b;
  int64_t sbk;  // b's k stride (its column stride is 1)
  int64_t k;
  double* out;
  int64_t som;

  // out[i0 + r][j] for r < rows, j < cols.
  void tile(int64_t i0, int64_t rows, int64_t cols) const {
    const double* ap = a + i0 * sam;
    const double* bp = b;
    if (rows == kTileRows && cols == kTileCols) {
      // Named accumulators: GCC at -O2 keeps them in registers, an indexed array it would not.
      Vec4d c00{}, c01{}, c10{}, c11{}, c20{}, c21{}, c30{}, c31{};
      const double *a0 = ap, *a1 = ap + sam, *a2 = ap + 2 * sam, *a3 = ap + 3 * sam;
      for (int64_t kk = 0; kk < k; ++kk) {
        Vec4d b0, b1;
        std::memcpy(&b0, bp + kk * sbk, sizeof b0);
        std::memcpy(&b1, bp + kk * sbk + 4, sizeof b1);
        const int64_t o = kk * sak;
        c00 += a0[o] * b0, c01 += a0[o] * b1;
        c10 += a1[o] * b0, c11 += a1[o] * b1;
        c20 += a2[o] * b0, c21 += a2[o] * b1;
        c30 += a3[o] * b0, c31 += a3[o] * b1;
      }
      const Vec4d acc[kTileRows][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
      for (int64_t r = 0; r < kTileRows; ++r)
        std::memcpy(out + (i0 + r) * som, acc[r], sizeof acc[r]);
      return;
    }
    double acc[kTileRows][kTileCols] = {};
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t r = 0; r < rows; ++r) {
        const double av = ap[r * sam + kk * sak];
        for (int64_t j = 0; j < cols; ++j) acc[r][j] += av * bp[kk * sbk + j];
      }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) out[(i0 + r) * som + j] = acc[r][j];
  }
};

}  // namespace

void bmm_f64_kernel(const Tensor& a, const Tensor& b_in, const Tensor& out) {
  const Tensor b = b_in.dim_size(2) == 1 || b_in.stride(2) == 1 ? b_in : dense(b_in, b_in.dtype());
  const int64_t batch = out.dim_size(0), m = out.dim_size(1), n = out.dim_size(2),
                k = a.dim_size(2);
  const double* pa = a.data<double>();
  const double* pb = b.data<double>();
  double* po = out.data<double>();
  const int64_t panels = (m + kPanelRows - 1) / kPanelRows;
  const int64_t work = std::min(m, kPanelRows) * k * n;
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(work, 1));
  parallel_for(0, batch * panels, grain, [&](int64_t t0, int64_t t1) {
    std::vector<double> packed(static_cast<size_t>(k * kTileCols));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bi = t / panels, p0 = (t % panels) * kPanelRows;
      const int64_t p1 = std::min(m, p0 + kPanelRows);
      const double* bb = pb + bi * b.stride(0);
      for (int64_t j0 = 0; j0 < n; j0 += kTileCols) {
        // Rows of b are usually a power-of-two apart, which would map the slice's lines onto a
        // few cache sets; a packed copy is contiguous.
        const int64_t cols = std::min(kTileCols, n - j0);
        double* dst = packed.data();
        const double* src = bb + j0;
        const int64_t sbk = b.stride(1);
        if (cols == kTileCols) {
          for (int64_t kk = 0; kk < k; ++kk)
            std::memcpy(dst + kk * kTileCols, src + kk * sbk, kTileCols * sizeof(double));
        } else {
          for (int64_t kk = 0; kk < k; ++kk)
            for (int64_t j = 0; j < cols; ++j) dst[kk * kTileCols + j] = src[kk * sbk + j];
        }
        const GemmF64 g{pa + bi * a.stride(0),
                        a.stride(1),
                        a.stride(2),
                        packed.data(),
                        kTileCols,
                        k,
                        po + bi * m * n + j0,
                        n};
        for (int64_t i0 = p0; i0 < p1; i0 += kTileRows)
          g.tile(i0, std::min(kTileRows, p1 - i0), cols);
      }
    }
  });
}

}  // namespace kiln::detail
