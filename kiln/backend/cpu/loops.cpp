#include "kiln/backend/cpu/loops.h"

namespace kiln {

void copy_into(const Tensor& dst, const Tensor& src) {
  visit_dtype(dst.dtype(), [&](auto to) {
    using TO = typename decltype(to)::type;
    visit_dtype(src.dtype(), [&](auto from) {
      using TA = typename decltype(from)::type;
      map_unary<TA, TO>(src, dst, [](auto v) { return static_cast<compute_t<TO>>(v); });
    });
  });
}

}  // namespace kiln
