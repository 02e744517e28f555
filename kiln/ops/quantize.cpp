// The int8 inference ops (Note [int8 quantization] in kiln/ops/quantize.h): their definitions.
// Kernels: quantize_per_tensor in kiln/backend/cpu/quantize_ops.cpp, the quantized convolution and
// linear on oneDNN's int8 primitives in kiln/backend/onednn/quantized_ops.cpp.
#include "kiln/ops/quantize.h"

#include <cmath>
#include <string>
#include <vector>

#include "kiln/ops/conv_attrs.h"
#include "kiln/ops/conv_geometry.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/op_factory.h"

namespace kiln {

namespace {

void check_quantized_dtype(const char* op, DType dt, const Loc& loc) {
  if (dt != DType::UInt8 && dt != DType::Int8)
    fail(op, loc, "expected dtype uint8 or int8, but got {}", dtype_name(dt));
}

class QuantizePerTensorOp final : public Op {
 public:
  QuantizePerTensorOp(double scale, DType dtype, const Loc& loc = Loc::current())
      : scale_(scale), dtype_(dtype) {
    if (!(std::isfinite(scale) && scale > 0.0))
      fail(name(), loc, "expected a finite scale > 0, but got {}", scale);
    check_quantized_dtype(name(), dtype, loc);
  }
  const char* name() const override { return "quantize_per_tensor"; }
  nlohmann::json attrs() const override {
    return {{"scale", attr_double(scale_)}, {"dtype", dtype_name(dtype_)}};
  }
  bool differentiable() const override { return false; }
  bool memory_bound() const override { return true; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor& x = in[0];
    if (!is_floating(x.dtype()))
      fail(name(), loc, "expected a floating input, but got {}{}", dtype_name(x.dtype()),
           shape_str(x.shape()));
    MemoryFormat f = x.dim() == 4 && x.is_channels_last() && !x.is_contiguous()
                         ? MemoryFormat::kChannelsLast
                         : MemoryFormat::kContiguous;
    return one_output({x.shape(), dtype_, x.device(), f});
  }

 private:
  double scale_;
  DType dtype_;
};

KILN_REGISTER_OP("quantize_per_tensor", (OpSchema{{"x"}, {"x_q"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const QuantizePerTensorOp>(a.f("scale"),
                                                                      a.dtype("dtype"));
                 });

// The checks the quantized convolution and linear share: integer operands of the right dtypes,
// a bias and a scale of one value per output channel.
void check_quantized_operands(const char* op, const std::vector<Tensor>& in, int64_t out_channels,
                              const Loc& loc) {
  const Tensor &x = in[0], &w = in[1], &b = in[2], &s = in[3];
  if (x.dtype() != DType::UInt8 && x.dtype() != DType::Int8)
    fail(op, loc, "expected a uint8 or int8 input (quantize_per_tensor's output), but got {}",
         detail::short_desc(x));
  if (w.dtype() != DType::Int8)
    fail(op, loc, "expected an int8 weight, but got {}", detail::short_desc(w));
  if (b.dtype() != DType::Int32 || b.dim() != 1 || b.dim_size(0) != out_channels)
    fail(op, loc, "expected an int32 bias of shape [{}], but got {}", out_channels,
         detail::short_desc(b));
  if (s.dtype() != DType::Float32 || s.dim() != 1 || s.dim_size(0) != out_channels)
    fail(op, loc, "expected a float32 out_scale of shape [{}], but got {}", out_channels,
         detail::short_desc(s));
}

class QuantizedConv2dOp final : public Op {
 public:
  QuantizedConv2dOp(Conv2dOptions options, bool relu, const Loc& loc = Loc::current())
      : options_(std::move(options)), relu_(relu) {
    detail::check_conv_options(name(), options_, loc);
  }
  const char* name() const override { return "quantized_conv2d"; }
  nlohmann::json attrs() const override {
    nlohmann::json a = detail::conv_attrs(options_);
    a["relu"] = relu_;
    return a;
  }
  bool differentiable() const override { return false; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &x = in[0], &w = in[1];
    if (x.dim() != 4)
      fail(name(), loc, "expected input of rank 4 (N,C,H,W), but got {}", detail::short_desc(x));
    if (w.dim() != 4 || w.dim_size(2) == 0 || w.dim_size(3) == 0)
      fail(name(), loc, "expected weight of rank 4 (O,C/groups,kH,kW), but got {}",
           detail::short_desc(w));
    const int64_t groups = options_.groups;
    if (w.dim_size(0) % groups != 0 || x.dim_size(1) != w.dim_size(1) * groups)
      fail(name(), loc,
           "expected input channels = weight.dim_size(1) * groups and weight.dim_size(0) divisible "
           "by "
           "groups ({}), but got input {} and weight {}",
           groups, detail::short_desc(x), detail::short_desc(w));
    check_quantized_operands(name(), in, w.dim_size(0), loc);
    const std::optional<detail::ConvGeometry> g =
        detail::conv_geometry(x.shape(), w.shape(), options_);
    if (!g)
      detail::fail_kernel_fit(name(), x.dim_size(2), x.dim_size(3), w.dim_size(2), w.dim_size(3),
                              options_, detail::short_desc(x) + " and " + detail::short_desc(w),
                              loc);
    return one_output(
        {{g->n, g->o, g->oh, g->ow}, DType::Float32, x.device(), MemoryFormat::kChannelsLast});
  }

  double flops(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    return 2.0 * static_cast<double>(out[0].numel()) *
           static_cast<double>(in[1].numel() / std::max<int64_t>(1, in[1].dim_size(0)));
  }

 private:
  Conv2dOptions options_;
  bool relu_;
};

KILN_REGISTER_OP("quantized_conv2d",
                 (OpSchema{
                     {"x_q", "weight_q", "bias_q", "out_scale"}, {"y"}, AutocastPolicy::kKeep}),
                 [](const Attrs& a) -> OpPtr {
                   return std::make_shared<const QuantizedConv2dOp>(
                       detail::conv_options_from_attrs(a), a.b("relu"));
                 });

class QuantizedLinearOp final : public Op {
 public:
  explicit QuantizedLinearOp(bool relu) : relu_(relu) {}
  const char* name() const override { return "quantized_linear"; }
  nlohmann::json attrs() const override { return {{"relu", relu_}}; }
  bool differentiable() const override { return false; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &x = in[0], &w = in[1];
    if (w.dim() != 2)
      fail(name(), loc, "expected weight of rank 2 [out, in], but got {}", detail::short_desc(w));
    if (x.dim() < 1 || x.dim_size(-1) != w.dim_size(1))
      fail(name(), loc, "expected input [..., {}] to match weight {}, but got {}", w.dim_size(1),
           detail::short_desc(w), detail::short_desc(x));
    check_quantized_operands(name(), in, w.dim_size(0), loc);
    Shape out = x.shape();
    out.back() = w.dim_size(0);
    return one_output({out, DType::Float32, x.device()});
  }

  double flops(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    return 2.0 * static_cast<double>(out[0].numel()) * static_cast<double>(in[1].dim_size(1));
  }

 private:
  bool relu_;
};

KILN_REGISTER_OP(
    "quantized_linear",
    (OpSchema{{"x_q", "weight_q", "bias_q", "out_scale"}, {"y"}, AutocastPolicy::kKeep}),
    [](const Attrs& a) -> OpPtr { return std::make_shared<const QuantizedLinearOp>(a.b("relu")); });

}  // namespace

Tensor quantize_per_tensor(const Tensor& x, double scale, DType dtype, const Loc& loc) {
  return dispatch1(std::make_shared<const QuantizePerTensorOp>(scale, dtype, loc), {x}, loc);
}

Tensor quantized_conv2d(const Tensor& x_q, const Tensor& weight_q, const Tensor& bias_q,
                        const Tensor& out_scale, bool relu, const Conv2dOptions& options,
                        const Loc& loc) {
  return dispatch1(std::make_shared<const QuantizedConv2dOp>(options, relu, loc),
                   {x_q, weight_q, bias_q, out_scale}, loc);
}

Tensor quantized_linear(const Tensor& x_q, const Tensor& weight_q, const Tensor& bias_q,
                        const Tensor& out_scale, bool relu, const Loc& loc) {
  return dispatch1(std::make_shared<const QuantizedLinearOp>(relu),
                   {x_q, weight_q, bias_q, out_scale}, loc);
}

}  // namespace kiln
