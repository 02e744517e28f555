// MultiheadAttention: names, init, shapes, errors, gradcheck, and live parity with
// torch.nn.MultiheadAttention (tests/nn/torch_nn_reference.py): outputs, attention weights and
// the gradients of inputs and parameters must agree within 1e-10 (float64) / 1e-5 (float32),
// scaled by max(1, max |torch|) of each tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/core/grad_mode.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/container.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"
#include "tests/nn/torch_nn_reference.h"
#include "tests/support/test_util.h"

namespace kiln::nn {
namespace {

using nlohmann::json;
using test::error_of;
using test::expect_contains;
using testing::bool_mask;
using testing::fill_parameters;
using testing::names_of;
using testing::state_json;
using testing::tensor_json;

TEST(NnAttention, ParameterNamesAndInitializationFollowPyTorch) {
  MultiheadAttention packed(8, 2);
  EXPECT_EQ(names_of(packed.state_dict()),
            (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                      "out_proj.bias"}));
  EXPECT_EQ(packed.in_proj_weight.shape(), (Shape{24, 8}));
  EXPECT_EQ(packed.head_dim, 4);
  // xavier_uniform_ on [3E, E]: bound sqrt(6 / (E + 3E)); out_proj: 1 / sqrt(E); zero biases.
  EXPECT_LE(max(abs(packed.in_proj_weight)).item(), std::sqrt(6.0 / 32.0));
  EXPECT_GT(max(abs(packed.in_proj_weight)).item(), 0.5 * std::sqrt(6.0 / 32.0));
  EXPECT_LE(max(abs(packed.out_proj->weight)).item(), 1.0 / std::sqrt(8.0));
  EXPECT_EQ(max(abs(packed.in_proj_bias)).item(), 0.0);
  EXPECT_EQ(max(abs(packed.out_proj->bias)).item(), 0.0);

  MultiheadAttention split(8, 4, {.kdim = 3, .vdim = 5});
  EXPECT_EQ(names_of(split.state_dict()),
            (std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight",
                                      "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(split.k_proj_weight.shape(), (Shape{8, 3}));
  EXPECT_EQ(split.v_proj_weight.shape(), (Shape{8, 5}));
  EXPECT_FALSE(split.in_proj_weight.defined());
  EXPECT_LE(max(abs(split.k_proj_weight)).item(), std::sqrt(6.0 / 11.0));

  MultiheadAttention no_bias(4, 1, {.bias = false});
  EXPECT_EQ(names_of(no_bias.state_dict()),
            (std::vector<std::string>{"in_proj_weight", "out_proj.weight"}));
  // reset_parameters redraws from the given generator: reproducible.
  Generator g1(7), g2(7);
  packed.reset_parameters(&g1);
  Tensor first = packed.in_proj_weight.clone();
  packed.reset_parameters(&g2);
  EXPECT_EQ(max(abs(packed.in_proj_weight - first)).item(), 0.0);
}

TEST(NnAttention, ShapesForEveryLayout) {
  MultiheadAttention seq_first(8, 2);
  auto [out, w] = seq_first.forward(ones({3, 2, 8}), ones({5, 2, 8}), ones({5, 2, 8}));
  EXPECT_EQ(out.shape(), (Shape{3, 2, 8}));
  EXPECT_EQ(w.shape(), (Shape{2, 3, 5}));
  auto per_head = seq_first.forward(ones({3, 2, 8}), ones({5, 2, 8}), ones({5, 2, 8}), Tensor(),
                                    true, Tensor(), /*average_attn_weights=*/false);
  EXPECT_EQ(per_head.second.shape(), (Shape{2, 2, 3, 5}));
  auto no_weights =
      seq_first.forward(ones({3, 2, 8}), ones({5, 2, 8}), ones({5, 2, 8}), Tensor(), false);
  EXPECT_FALSE(no_weights.second.defined());

  MultiheadAttention batch_first(8, 2, {.batch_first = true, .kdim = 3, .vdim = 6});
  auto [bo, bw] = batch_first.forward(ones({2, 3, 8}), ones({2, 5, 3}), ones({2, 5, 6}));
  EXPECT_EQ(bo.shape(), (Shape{2, 3, 8}));
  EXPECT_EQ(bw.shape(), (Shape{2, 3, 5}));
  auto [uo, uw] = batch_first.forward(ones({3, 8}), ones({5, 3}), ones({5, 6}), Tensor(), true,
                                      Tensor(), false);
  EXPECT_EQ(uo.shape(), (Shape{3, 8}));
  EXPECT_EQ(uw.shape(), (Shape{2, 3, 5}));

  // The one-input forward is unmasked self-attention, usable inside a Sequential.
  auto mha = std::make_shared<MultiheadAttention>(8, 4, MhaOptions{.batch_first = true});
  Sequential net(mha);
  Tensor x = sample_tensor({2, 3, 8}, 5).to(DType::Float32);
  EXPECT_EQ(max(abs(net(x) - mha->forward(x, x, x).first)).item(), 0.0);
}

TEST(NnAttention, WeightsSumToOneAndMasksHideKeys) {
  MultiheadAttention mha(4, 2);
  Tensor q = sample_tensor({3, 2, 4}, 1).to(DType::Float32);
  Tensor kpm = bool_mask({2, 3}, [](const auto& i) { return i[0] == 1 && i[1] == 2; });
  auto [out, w] = mha.forward(q, q, q, kpm, true, Tensor(), true, /*is_causal=*/true);
  std::vector<float> wv = w.to_vector<float>();  // [N=2, L=3, S=3]
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i) {
      float total = 0;
      for (int j = 0; j < 3; ++j) {
        float v = wv[(n * 3 + i) * 3 + j];
        total += v;
        if (j > i || (n == 1 && j == 2)) {
          EXPECT_EQ(v, 0.0f) << n << " " << i << " " << j;
        }
      }
      EXPECT_NEAR(total, 1.0f, 1e-6);
    }
  // A query whose keys are all hidden gets NaN, as in PyTorch.
  Tensor all = bool_mask({2, 3}, [](const auto& i) { return i[0] == 0; });
  auto [nan_out, nan_w] = mha.forward(q, q, q, all);
  EXPECT_TRUE(std::isnan(nan_out.to_vector<float>()[0]));
}

TEST(NnAttention, RunsOnMetaTensors) {
  MultiheadAttention mha(8, 2, {.batch_first = true});
  for (const Tensor& p : mha.parameters())
    replace_tensor_data(p, empty(p.shape(), {p.dtype(), kMeta}));
  Tensor q = empty({2, 3, 8}, {DType::Float32, kMeta});
  auto [out, w] = mha.forward(q, q, q, empty({2, 3}, {DType::Bool, kMeta}), true, Tensor(), true,
                              /*is_causal=*/true);
  EXPECT_TRUE(out.is_meta());
  EXPECT_EQ(out.shape(), (Shape{2, 3, 8}));
  EXPECT_EQ(w.shape(), (Shape{2, 3, 3}));
}

TEST(NnAttention, DropoutOnlyWhileTraining) {
  Generator gen(3);
  MultiheadAttention mha(4, 1, {.dropout = 0.5, .gen = &gen});
  Tensor q = sample_tensor({6, 1, 4}, 2).to(DType::Float32);
  auto [o1, w1] = mha.forward(q, q, q);
  int zeros = 0;
  for (float v : w1.to_vector<float>()) zeros += v == 0.0f;
  EXPECT_GT(zeros, 0);
  mha.eval();
  auto [o2, w2] = mha.forward(q, q, q);
  EXPECT_NEAR(sum(w2).item(), 6.0, 1e-5);
}

TEST(NnAttention, ErrorsNameTheLayerAndShapes) {
  expect_contains(error_of([] { MultiheadAttention(6, 4); }),
                  {"[MultiheadAttention]", "embed_dim 6", "4 heads", "test_attention.cpp"});
  MultiheadAttention mha(8, 2);
  Tensor x = ones({3, 2, 8});
  expect_contains(error_of([&] {
                    mha.forward(ones({3, 2, 7}), x, x);
                  }),
                  {"[MultiheadAttention]", "float32[3, 2, 7]", "embed_dim", "test_attention.cpp"});
  expect_contains(error_of([&] {
                    mha.forward(ones({1, 3, 2, 8}), x, x);
                  }),
                  {"[MultiheadAttention]", "rank 3", "float32[1, 3, 2, 8]"});
  expect_contains(error_of([&] {
                    mha.forward(x, ones({3, 2}), x);
                  }),
                  {"[MultiheadAttention]", "float32[3, 2]"});
  expect_contains(error_of([&] {
                    mha.forward(x, ones({4, 2, 8}), x);
                  }),
                  {"[MultiheadAttention]", "key float32[4, 2, 8]", "value float32[3, 2, 8]"});
  expect_contains(
      error_of([&] {
        mha.forward(x, x, x, zeros({2, 4}, {DType::Bool}));
      }),
      {"[MultiheadAttention]", "key_padding_mask [N, S] = [2, 3]", "bool[2, 4]", "test_attention"});
  expect_contains(error_of([&] {
                    mha.forward(x, x, x, Tensor(), true, zeros({3, 4}));
                  }),
                  {"[MultiheadAttention]", "attn_mask", "[3, 3]", "[4, 3, 3]", "float32[3, 4]"});
  expect_contains(error_of([&] {
                    mha.forward(x, x, x, Tensor(), true, zeros({3, 3}, {DType::Int64}));
                  }),
                  {"attn_mask", "int64[3, 3]"});
  expect_contains(error_of([&] {
                    Tensor d = ones({3, 2, 8}, {DType::Float64});
                    mha.forward(d, d, d);
                  }),
                  {"[MultiheadAttention]", "dtype float32", "float64[3, 2, 8]"});
}

// Runs fn with the layer's parameter handles pointed at `params` (the copies gradcheck
// perturbs and differentiates); forward reads these handles.
template <class F>
auto with_params(MultiheadAttention& m, const std::vector<Tensor>& params, F fn) {
  std::vector<Tensor*> slots = {m.in_proj_weight.defined() ? &m.in_proj_weight : &m.q_proj_weight,
                                &m.in_proj_bias, &m.out_proj->weight, &m.out_proj->bias};
  if (!m.in_proj_weight.defined()) {
    slots.push_back(&m.k_proj_weight);
    slots.push_back(&m.v_proj_weight);
  }
  std::vector<Tensor> saved;
  for (size_t i = 0; i < slots.size(); ++i) {
    saved.push_back(*slots[i]);
    *slots[i] = params[i];
  }
  auto out = fn();
  for (size_t i = 0; i < slots.size(); ++i) *slots[i] = saved[i];
  return out;
}

TEST(NnAttention, GradcheckFloat64WithMasks) {
  MultiheadAttention mha(4, 2, {.batch_first = true});
  mha.to(DType::Float64);
  fill_parameters(mha, 10);
  Tensor kpm = bool_mask({2, 4}, [](const auto& i) { return i[0] == 1 && i[1] == 1; });
  Tensor amask = sample_tensor({3, 4}, 4, -1.0, 0.0);
  auto fn = [&](const std::vector<Tensor>& x) {
    return with_params(mha, {x[3], x[4], x[5], x[6]}, [&] {
      auto [out, w] = mha.forward(x[0], x[1], x[2], kpm, true, amask, false, /*is_causal=*/true);
      return std::vector<Tensor>{out, w};
    });
  };
  EXPECT_TRUE(gradcheck(
      fn, {sample_tensor({2, 3, 4}, 1), sample_tensor({2, 4, 4}, 2), sample_tensor({2, 4, 4}, 3),
           mha.in_proj_weight, mha.in_proj_bias, mha.out_proj->weight, mha.out_proj->bias}));
}

TEST(NnAttention, GradcheckFloat64SeparateProjectionsAnd3dBoolMask) {
  MultiheadAttention mha(4, 2, {.kdim = 3, .vdim = 2});
  mha.to(DType::Float64);
  fill_parameters(mha, 20);
  Tensor mask = bool_mask({4, 2, 3}, [](const auto& i) { return i[2] > 0 && (i[0] + i[1]) % 2; });
  auto fn = [&](const std::vector<Tensor>& x) {
    return with_params(mha, {x[3], x[4], x[5], x[6], x[7], x[8]}, [&] {
      auto [out, w] = mha.forward(x[0], x[1], x[2], Tensor(), true, mask);
      return std::vector<Tensor>{out, w};
    });
  };
  EXPECT_TRUE(gradcheck(
      fn, {sample_tensor({2, 2, 4}, 1), sample_tensor({3, 2, 3}, 2), sample_tensor({3, 2, 2}, 3),
           mha.q_proj_weight, mha.in_proj_bias, mha.out_proj->weight, mha.out_proj->bias,
           mha.k_proj_weight, mha.v_proj_weight}));
}

TEST(NnAttention, GradgradcheckTinySelfAttention) {
  MultiheadAttention mha(2, 1);
  mha.to(DType::Float64);
  fill_parameters(mha, 30);
  auto fn = [&](const std::vector<Tensor>& x) {
    return std::vector<Tensor>{mha.forward(x[0], x[0], x[0]).first};
  };
  EXPECT_TRUE(gradgradcheck(fn, {sample_tensor({2, 1, 2}, 1)}));
}

// --- live parity with PyTorch ------------------------------------------------------------------

struct MhaCase {
  std::string name = "";
  int64_t embed_dim = 8, num_heads = 2;
  MhaOptions options = {};
  DType dtype = DType::Float64;
  int64_t tgt = 3, src = 4, batch = 2;  // batch 0: unbatched inputs
  bool self_attention = false;          // query is key is value (tgt == src)
  std::string key_padding_mask = "";    // "", "bool", "float"
  std::string attn_mask = "";           // "", "bool2d", "float2d", "bool3d", "float3d"
  bool is_causal = false;
  bool average = true;
  bool torch_init = false;  // run with torch's own initial weights, loaded into kiln
};

std::vector<MhaCase> mha_cases() {
  std::vector<MhaCase> c;
  c.push_back({.name = "self_seq_first", .tgt = 4, .self_attention = true});
  c.push_back({.name = "cross_batch_first_kpm_per_head",
               .options = {.batch_first = true},
               .key_padding_mask = "bool",
               .average = false});
  c.push_back({.name = "causal", .tgt = 4, .self_attention = true, .is_causal = true});
  c.push_back({.name = "bool2d_causal_plus_kpm",
               .num_heads = 4,
               .tgt = 4,
               .key_padding_mask = "bool",
               .attn_mask = "bool2d"});
  c.push_back({.name = "float3d_mask_bool_kpm",
               .key_padding_mask = "bool",
               .attn_mask = "float3d",
               .average = false});
  c.push_back(
      {.name = "bool3d_mask_batch_first", .options = {.batch_first = true}, .attn_mask = "bool3d"});
  c.push_back({.name = "kdim_vdim_float_kpm",
               .options = {.batch_first = true, .kdim = 5, .vdim = 3},
               .key_padding_mask = "float"});
  // PyTorch 2's rule (both added); the script folds them for PyTorch 1.13.
  c.push_back(
      {.name = "float_kpm_plus_float2d", .key_padding_mask = "float", .attn_mask = "float2d"});
  c.push_back({.name = "no_bias", .options = {.bias = false}, .attn_mask = "float2d"});
  c.push_back({.name = "unbatched_kpm", .batch = 0, .key_padding_mask = "bool"});
  c.push_back({.name = "torch_init_self", .tgt = 4, .self_attention = true, .torch_init = true});
  c.push_back({.name = "torch_init_kdim",
               .options = {.kdim = 6, .vdim = 4},
               .key_padding_mask = "bool",
               .torch_init = true});
  // float32 (tolerance 1e-5)
  for (MhaCase f : {c[0], c[1], c[3], c[6], c[7]}) {
    f.name += "/float32";
    f.dtype = DType::Float32;
    c.push_back(f);
  }
  return c;
}

struct MhaRun {
  MhaCase spec;
  std::shared_ptr<MultiheadAttention> mha;
  Tensor query = {}, key = {}, value = {}, kpm = {}, mask = {}, grad_out = {}, grad_weights = {};
  json request = {};
};

Shape seq_shape(const MhaCase& c, int64_t len, int64_t features) {
  if (c.batch == 0) return {len, features};
  return c.options.batch_first ? Shape{c.batch, len, features} : Shape{len, c.batch, features};
}

MhaRun prepare(const MhaCase& c, uint64_t seed) {
  MhaRun r{c, std::make_shared<MultiheadAttention>(c.embed_dim, c.num_heads, c.options)};
  r.mha->to(c.dtype);
  r.mha->eval();
  if (!c.torch_init) fill_parameters(*r.mha, seed);
  auto input = [&](Shape shape, uint64_t s) {
    Tensor t = sample_tensor(shape, s).to(c.dtype);
    t.set_requires_grad(true);
    return t;
  };
  const int64_t n = std::max<int64_t>(c.batch, 1);
  r.query = input(seq_shape(c, c.tgt, c.embed_dim), seed + 100);
  if (c.self_attention) {
    r.key = r.value = r.query;
  } else {
    r.key = input(seq_shape(c, c.src, r.mha->kdim), seed + 101);
    r.value = input(seq_shape(c, c.src, r.mha->vdim), seed + 102);
  }
  const int64_t s = c.self_attention ? c.tgt : c.src;
  // Key 0 is never hidden, so no query row is fully masked (PyTorch and kiln would give NaN).
  Shape kpm_shape = c.batch == 0 ? Shape{s} : Shape{n, s};
  if (c.key_padding_mask == "bool")
    r.kpm = bool_mask(kpm_shape, [&](const auto& i) {
      int64_t b = i.size() == 2 ? i[0] : 0, j = i.back();
      return j > 0 && (j + b) % 3 == 0;
    });
  else if (c.key_padding_mask == "float")
    r.kpm = sample_tensor(kpm_shape, seed + 103, -2.0, 0.0).to(c.dtype);
  Shape m2 = {c.tgt, s}, m3 = {n * c.num_heads, c.tgt, s};
  if (c.attn_mask == "bool2d")
    r.mask = bool_mask(m2, [](const auto& i) { return i[1] > i[0]; });
  else if (c.attn_mask == "float2d")
    r.mask = sample_tensor(m2, seed + 104, -1.0, 1.0).to(c.dtype);
  else if (c.attn_mask == "bool3d")
    r.mask = bool_mask(m3, [](const auto& i) { return i[2] > 0 && (i[0] + i[1] + i[2]) % 4 == 0; });
  else if (c.attn_mask == "float3d")
    r.mask = sample_tensor(m3, seed + 105, -1.0, 1.0).to(c.dtype);
  r.grad_out = sample_tensor(seq_shape(c, c.tgt, c.embed_dim), seed + 106).to(c.dtype);
  Shape w_shape = c.average ? Shape{n, c.tgt, s} : Shape{n, c.num_heads, c.tgt, s};
  if (c.batch == 0) w_shape.erase(w_shape.begin());
  r.grad_weights = sample_tensor(w_shape, seed + 107).to(c.dtype);

  json& q = r.request;
  q["name"] = c.name;
  q["module"] = "mha";
  q["dtype"] = dtype_name(c.dtype);
  q["seed"] = seed;
  q["config"] = {{"embed_dim", c.embed_dim},
                 {"num_heads", c.num_heads},
                 {"bias", c.options.bias},
                 {"batch_first", c.options.batch_first},
                 {"kdim", c.options.kdim ? json(*c.options.kdim) : json(nullptr)},
                 {"vdim", c.options.vdim ? json(*c.options.vdim) : json(nullptr)}};
  q["state"] = c.torch_init ? json(nullptr) : state_json(*r.mha);
  q["inputs"]["query"] = tensor_json(r.query);
  if (!c.self_attention) {
    q["inputs"]["key"] = tensor_json(r.key);
    q["inputs"]["value"] = tensor_json(r.value);
  }
  if (r.kpm.defined()) q["inputs"]["key_padding_mask"] = tensor_json(r.kpm);
  if (r.mask.defined()) q["inputs"]["attn_mask"] = tensor_json(r.mask);
  q["options"] = {{"average_attn_weights", c.average}, {"is_causal", c.is_causal}};
  q["grad_outputs"] = {{"output", tensor_json(r.grad_out)},
                       {"weights", tensor_json(r.grad_weights)}};
  return r;
}

TEST(NnAttention, MatchesTorchMultiheadAttention) {
  testing::compare_with_torch(mha_cases(), 1, "attention", prepare, [](MhaRun& r, const json& ref) {
    const MhaCase& c = r.spec;
    testing::ModuleParity parity(*r.mha, ref, c.name, c.dtype, c.torch_init);
    auto [out, weights] =
        r.mha->forward(r.query, r.key, r.value, r.kpm, true, r.mask, c.average, c.is_causal);
    kiln::backward({out, weights}, {r.grad_out, r.grad_weights});
    parity.check("output", out, ref["outputs"]["output"]);
    parity.check("weights", weights, ref["outputs"]["weights"]);
    parity.check("query.grad", r.query.grad(), ref["input_grads"]["query"]);
    if (!c.self_attention) {
      parity.check("key.grad", r.key.grad(), ref["input_grads"]["key"]);
      parity.check("value.grad", r.value.grad(), ref["input_grads"]["value"]);
    }
    parity.check_param_grads_and_report();
  });
}

}  // namespace
}  // namespace kiln::nn
