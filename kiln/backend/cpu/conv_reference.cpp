// The reference convolution loops that float64 runs (oneDNN has no float64 convolution): direct
// loops, parallel over whole output planes.
#include "kiln/backend/cpu/conv_reference.h"

#include <algorithm>

#include "kiln/core/parallel.h"

namespace kiln {
namespace detail {

namespace {

// Rows of work below this many multiply-adds stay on one thread.
int64_t grain_for(int64_t work_per_row) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(work_per_row, 1));
}

}  // namespace

// Note [conv reference loops]: every output element is one sum in a fixed order (channels, then
// kernel rows, then kernel columns; for the weight gradient: batch, then output rows, then
// columns), and threads split whole output planes, so the result is the same for every thread
// count. The data gradient gathers (each input element sums its contributions) instead of
// scattering, so no two threads write one element.
void ref_forward(const ConvGeometry& g, const double* x, const double* w, const double* b,
                 double* y) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t grain = grain_for(g.oh * g.ow * cg * g.kh * g.kw);
  parallel_for(0, g.n * g.o, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.o, o = r % g.o;
      const double* xn = x + (n * g.c + (o / og) * cg) * g.h * g.w;
      const double* wo = w + o * cg * g.kh * g.kw;
      double* yo = y + r * g.oh * g.ow;
      for (int64_t i = 0; i < g.oh; ++i) {
        for (int64_t j = 0; j < g.ow; ++j) {
          double acc = b ? b[o] : 0.0;
          for (int64_t c = 0; c < cg; ++c) {
            for (int64_t ki = 0; ki < g.kh; ++ki) {
              const int64_t ih = i * g.sh - g.pt + ki * g.dh;
              if (ih < 0 || ih >= g.h) continue;
              const double* xr = xn + (c * g.h + ih) * g.w;
              const double* wr = wo + (c * g.kh + ki) * g.kw;
              for (int64_t kj = 0; kj < g.kw; ++kj) {
                const int64_t iw = j * g.sw - g.pl + kj * g.dw;
                if (iw >= 0 && iw < g.w) acc += xr[iw] * wr[kj];
              }
            }
          }
          yo[i * g.ow + j] = acc;
        }
      }
    }
  });
}

void ref_backward_data(const ConvGeometry& g, const double* gy, const double* w, double* gx) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t grain = grain_for(g.h * g.w * og * g.kh * g.kw);
  parallel_for(0, g.n * g.c, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.c, c = r % g.c, grp = c / cg, cl = c % cg;
      const double* gyn = gy + (n * g.o + grp * og) * g.oh * g.ow;
      double* gxc = gx + r * g.h * g.w;
      for (int64_t ih = 0; ih < g.h; ++ih) {
        for (int64_t iw = 0; iw < g.w; ++iw) {
          double acc = 0.0;
          for (int64_t oo = 0; oo < og; ++oo) {
            const double* go = gyn + oo * g.oh * g.ow;
            const double* wo = w + ((grp * og + oo) * cg + cl) * g.kh * g.kw;
            for (int64_t ki = 0; ki < g.kh; ++ki) {
              const int64_t ti = ih + g.pt - ki * g.dh;
              if (ti < 0 || ti % g.sh != 0 || ti / g.sh >= g.oh) continue;
              const double* gr = go + (ti / g.sh) * g.ow;
              for (int64_t kj = 0; kj < g.kw; ++kj) {
                const int64_t tj = iw + g.pl - kj * g.dw;
                if (tj < 0 || tj % g.sw != 0 || tj / g.sw >= g.ow) continue;
                acc += gr[tj / g.sw] * wo[ki * g.kw + kj];
              }
            }
          }
          gxc[ih * g.w + iw] = acc;
        }
      }
    }
  });
}

void ref_backward_weights(const ConvGeometry& g, const double* x, const double* gy, double* gw) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  const int64_t grain = grain_for(g.n * g.oh * g.ow * g.kh * g.kw);
  parallel_for(0, g.o * cg, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r / cg, c = (o / og) * cg + r % cg;
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          double acc = 0.0;
          for (int64_t n = 0; n < g.n; ++n) {
            const double* xc = x + (n * g.c + c) * g.h * g.w;
            const double* go = gy + (n * g.o + o) * g.oh * g.ow;
            for (int64_t i = 0; i < g.oh; ++i) {
              const int64_t ih = i * g.sh - g.pt + ki * g.dh;
              if (ih < 0 || ih >= g.h) continue;
              for (int64_t j = 0; j < g.ow; ++j) {
                const int64_t iw = j * g.sw - g.pl + kj * g.dw;
                if (iw >= 0 && iw < g.w) acc += go[i * g.ow + j] * xc[ih * g.w + iw];
              }
            }
          }
          gw[(r * g.kh + ki) * g.kw + kj] = acc;
        }
      }
    }
  });
}

}  // namespace detail
}  // namespace kiln
