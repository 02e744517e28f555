#include "kiln/ops/elementwise_layout.h"

namespace kiln {

Strides broadcast_strides(const Tensor& t, const Shape& out_shape) {
  Strides s(out_shape.size(), 0);
  size_t lead = out_shape.size() - t.shape().size();
  for (size_t i = 0; i < t.shape().size(); ++i)
    s[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return s;
}

MemoryFormat elementwise_format(const std::vector<Tensor>& inputs, const Shape& out_shape) {
  bool any = false;
  for (const Tensor& t : inputs) {
    if (t.shape() != out_shape) continue;
    if (!t.is_channels_last()) return MemoryFormat::kContiguous;
    any = true;
  }
  return any ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous;
}

}  // namespace kiln
