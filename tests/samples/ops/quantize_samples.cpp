// Registry samples of the ops defined in kiln/ops/quantize.cpp (Note [op registry]). The PyTorch
// expressions compute the same integer arithmetic in float64 (exact for these sizes), then the
// float32 scaling, so the results agree exactly (Note [int8 quantization]); on a CPU without VNNI
// with the halved weights and bias the kernels use there (Note [int8 without VNNI]), times 2.
#include <string>
#include <vector>

#include "kiln/backend/onednn/cpu_isa.h"
#include "kiln/ops/quantize.h"
#include "kiln/ops/shape_ops.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

std::vector<Tensor> one(Tensor t) {
  return {std::move(t)};
}

// Integers in [lo, hi] as dtype (to_dtype truncates toward zero).
Tensor ints(Shape shape, uint64_t seed, double lo, double hi, DType dtype) {
  return to_dtype(sample_tensor(std::move(shape), seed, lo < 0 ? lo - 0.999 : lo, hi + 0.999),
                  dtype);
}

Tensor scales(int64_t n, uint64_t seed) {
  return to_dtype(sample_tensor({n}, seed, 1e-4, 3e-3), DType::Float32);
}

// kiln takes a bias and an out_scale of exactly [out_channels] and a rank-4 convolution input;
// torch's broadcasting would accept more, so the twins refuse what kiln refuses (None has no
// .double()), which the differential fuzzer's shape mutations need.
#define Q_BIAS "(a2 if a2.dim() == 1 and a2.shape[0] == a1.shape[0] else None).double()"
#define Q_SCALE "(a3 if a3.dim() == 1 and a3.shape[0] == a1.shape[0] else None)"
#define Q_X4 "(a0 if a0.dim() == 4 else None).double()"

// The weight (a1) and bias (`bias`) as the kernel multiplies them: halved, round half to even,
// and doubled back where it halves them (uint8 convolutions and every matmul without VNNI).
std::string q_weight(bool halved) {
  return halved ? "(torch.round(a1.double() / 2) * 2)" : "a1.double()";
}
std::string q_bias(bool halved) {
  return halved ? "(torch.round(" Q_BIAS " / 2) * 2)" : Q_BIAS;
}
bool conv_halves(DType x) {
  return x == DType::UInt8 && !onednn_exact_int8();
}
bool linear_halves() {
  return !onednn_exact_int8();
}

// The torch twin of quantize_per_tensor: float32 multiply, round half to even, saturate.
std::string torch_quantize(double scale, const char* lo, const char* hi, const char* dtype) {
  return "torch.clamp(torch.round(a0.float() * torch.tensor(1.0 / " + std::to_string(scale) +
         ", dtype=torch.float32)), " + lo + ", " + hi + ").to(torch." + dtype + ")";
}

KILN_REGISTER_OP_SAMPLES("quantize_per_tensor", [] {
  return std::vector<OpSample>{
      {"uint8_saturating",
       {sample_tensor({2, 3, 4}, 601, -0.5, 3.0)},
       [](const std::vector<Tensor>& in) {
         return one(quantize_per_tensor(in[0], 0.0125, DType::UInt8));
       },
       torch_quantize(0.0125, "0", "255", "uint8"),
       {},
       false},
      {"int8_channels_last",
       {contiguous(sample_tensor({2, 3, 4, 5}, 602, -2.0, 2.0), MemoryFormat::kChannelsLast)},
       [](const std::vector<Tensor>& in) {
         return one(quantize_per_tensor(in[0], 0.015625, DType::Int8));
       },
       torch_quantize(0.015625, "-127", "127", "int8"),
       {},
       false},
  };
});

KILN_REGISTER_OP_SAMPLES("quantized_conv2d", [] {
  return std::vector<OpSample>{
      {"uint8_padded_relu",
       {ints({2, 3, 6, 6}, 611, 0, 255, DType::UInt8),
        ints({4, 3, 3, 3}, 612, -127, 127, DType::Int8),
        ints({4}, 613, -20000, 20000, DType::Int32), scales(4, 614)},
       [](const std::vector<Tensor>& in) {
         return one(quantized_conv2d(in[0], in[1], in[2], in[3], true, {.padding = 1}));
       },
       "(F.conv2d(" Q_X4 ", " + q_weight(conv_halves(DType::UInt8)) + ", padding=1) + " +
           q_bias(conv_halves(DType::UInt8)) +
           ".view(1, -1, 1, 1))"
           ".float().mul(" Q_SCALE ".view(1, -1, 1, 1)).relu()",
       {},
       false},
      {"int8_strided_groups",
       {ints({1, 4, 7, 5}, 615, -127, 127, DType::Int8),
        ints({6, 2, 3, 2}, 616, -127, 127, DType::Int8), ints({6}, 617, -3000, 3000, DType::Int32),
        scales(6, 618)},
       [](const std::vector<Tensor>& in) {
         return one(
             quantized_conv2d(in[0], in[1], in[2], in[3], false, {.stride = 2, .groups = 2}));
       },
       "(F.conv2d(" Q_X4 ", a1.double(), stride=2, groups=2) + " Q_BIAS ".view(1, -1, 1, 1))"
       ".float().mul(" Q_SCALE ".view(1, -1, 1, 1))",
       {},
       false},
  };
});

KILN_REGISTER_OP_SAMPLES("quantized_linear", [] {
  return std::vector<OpSample>{
      {"uint8_relu",
       {ints({3, 5}, 621, 0, 255, DType::UInt8), ints({4, 5}, 622, -127, 127, DType::Int8),
        ints({4}, 623, -20000, 20000, DType::Int32), scales(4, 624)},
       [](const std::vector<Tensor>& in) {
         return one(quantized_linear(in[0], in[1], in[2], in[3], true));
       },
       "(a0.double() @ " + q_weight(linear_halves()) + ".t() + " + q_bias(linear_halves()) +
           ").float().mul(" Q_SCALE ").relu()",
       {},
       false},
      {"int8_batched",
       {ints({2, 3, 6}, 625, -127, 127, DType::Int8), ints({5, 6}, 626, -127, 127, DType::Int8),
        ints({5}, 627, -3000, 3000, DType::Int32), scales(5, 628)},
       [](const std::vector<Tensor>& in) {
         return one(quantized_linear(in[0], in[1], in[2], in[3], false));
       },
       "(a0.double() @ " + q_weight(linear_halves()) + ".t() + " + q_bias(linear_halves()) +
           ").float().mul(" Q_SCALE ")",
       {},
       false},
  };
});

}  // namespace

}  // namespace kiln
