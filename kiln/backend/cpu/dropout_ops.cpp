// CPU kernel of the dropout op (Note [kernel table]): applies the keep mask and the scale. The
// definition (attributes, infer, vjp) and the public dropout() that draws the mask are in
// kiln/ops/dropout.cpp.
#include "kiln/ops/dropout_ops.h"
#include "kiln/backend/cpu/loops.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

// Multiplying (rather than selecting 0) keeps NaN and Inf of dropped elements, as PyTorch's
// x * noise does.
void dropout_kernel(const Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const double scale = detail::dropout_attrs(op).scale;
  visit_dtype(in[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const C keep = static_cast<C>(scale);
    map_binary<T, bool, T>(in[0], in[1], out[0],
                           [keep](C v, bool m) { return v * (m ? keep : C(0)); });
  });
}

KILN_REGISTER_KERNEL("dropout", DeviceType::CPU, dropout_kernel);

}  // namespace

}  // namespace kiln
