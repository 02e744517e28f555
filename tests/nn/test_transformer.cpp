// TransformerEncoderLayer / TransformerEncoder: names, modes, errors, gradcheck, and live parity
// with torch.nn.TransformerEncoderLayer / TransformerEncoder (tests/nn/torch_nn_reference.py):
// outputs and the gradients of the input and of every parameter within 1e-10 (float64) / 1e-5
// (float32), scaled by max(1, max |torch|) of each tensor.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/nn/summary.h"
#include "kiln/nn/transformer.h"
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

TEST(NnTransformer, NamesFollowPyTorch) {
  TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16});
  EXPECT_EQ(names_of(layer.state_dict()),
            (std::vector<std::string>{
                "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}));
  std::vector<std::string> modules;
  for (const auto& [name, m] : layer.named_modules()) modules.push_back(name);
  EXPECT_EQ(modules,
            (std::vector<std::string>{"", "self_attn", "self_attn.out_proj", "linear1", "dropout",
                                      "linear2", "norm1", "norm2", "dropout1", "dropout2"}));
  EXPECT_EQ(layer.linear1->weight.shape(), (Shape{16, 8}));

  TransformerEncoder encoder(
      [] {
        return std::make_shared<TransformerEncoderLayer>(
            4, 2, TransformerEncoderLayerOptions{.dim_feedforward = 8});
      },
      2, std::make_shared<LayerNorm>(Shape{4}));
  auto names = names_of(encoder.state_dict());
  ASSERT_EQ(names.size(), 26u);
  EXPECT_EQ(names.front(), "layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(names[12], "layers.1.self_attn.in_proj_weight");
  EXPECT_EQ(names.back(), "norm.bias");
}

TEST(NnTransformer, DropoutOnlyWhileTrainingAndShapes) {
  Generator gen(11);
  TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.3, .gen = &gen});
  Tensor x = sample_tensor({5, 2, 8}, 1).to(DType::Float32);
  Tensor a = layer(x), b = layer(x);
  EXPECT_GT(max(abs(a - b)).item(), 0.0);  // two dropout draws
  layer.eval();
  EXPECT_FALSE(layer.self_attn->is_training());
  EXPECT_EQ(max(abs(layer(x) - layer(x))).item(), 0.0);
  EXPECT_EQ(layer(x).shape(), (Shape{5, 2, 8}));
  EXPECT_EQ(layer(sample_tensor({5, 8}, 2).to(DType::Float32)).shape(), (Shape{5, 8}));

  TransformerEncoderLayer bf(8, 2, {.dim_feedforward = 16, .batch_first = true});
  EXPECT_EQ(bf.forward(ones({2, 5, 8}), Tensor(), zeros({2, 5}, {DType::Bool})).shape(),
            (Shape{2, 5, 8}));
}

TEST(NnTransformer, SummaryCountsEveryParameter) {
  TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .batch_first = true});
  std::string text = summary(layer, {5, 8});
  // 3*8*8 + 3*8 + 8*8 + 8 (attention) + 16*8 + 16 + 8*16 + 8 (feed-forward) + 4*8 (norms).
  // (summary has rows for leaf modules only, so the attention itself gets none.)
  expect_contains(text, {"Total params: 600", "linear1 (Linear)", "[None, 5, 16]"});
}

TEST(NnTransformer, ErrorsNameTheLayer) {
  expect_contains(
      error_of([] { TransformerEncoderLayer(8, 2, {.activation = "tanh"}); }),
      {"[TransformerEncoderLayer]", "\"relu\" or \"gelu\"", "\"tanh\"", "test_transformer.cpp"});
  expect_contains(error_of([] { TransformerEncoderLayer(6, 4); }),
                  {"[MultiheadAttention]", "embed_dim 6"});
  TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 8});
  expect_contains(
      error_of([&] {
        layer.forward(ones({5, 2, 6}), Tensor());
      }),
      {"[TransformerEncoderLayer]", "d_model = 8", "float32[5, 2, 6]", "test_transformer.cpp"});
  expect_contains(error_of([&] {
                    layer.forward(ones({5, 2, 8}), zeros({5, 4}));
                  }),
                  {"[MultiheadAttention]", "attn_mask", "float32[5, 4]", "test_transformer.cpp"});
  expect_contains(error_of([] { TransformerEncoder({}, 2); }), {"[TransformerEncoder]", "factory"});
}

TEST(NnTransformer, GradcheckFloat64) {
  for (bool norm_first : {false, true}) {
    TransformerEncoderLayer layer(
        4, 2,
        {.dim_feedforward = 6, .dropout = 0.0, .activation = "gelu", .norm_first = norm_first});
    layer.to(DType::Float64);
    fill_parameters(layer, 3);
    Tensor kpm = bool_mask({2, 3}, [](const auto& i) { return i[0] == 1 && i[1] == 2; });
    auto fn = [&](const std::vector<Tensor>& x) {
      return std::vector<Tensor>{layer.forward(x[0], Tensor(), kpm, /*is_causal=*/true)};
    };
    EXPECT_TRUE(gradcheck(fn, {sample_tensor({3, 2, 4}, 7)})) << norm_first;
  }
}

// --- live parity with PyTorch ------------------------------------------------------------------

struct EncoderCase {
  std::string name = "";
  std::string module = "encoder_layer";  // or "encoder"
  int64_t d_model = 8, nhead = 2;
  TransformerEncoderLayerOptions options{.dim_feedforward = 12};
  DType dtype = DType::Float64;
  int64_t seq = 5, batch = 2;  // batch 0: unbatched
  std::string src_mask = "";   // "", "bool", "float"
  bool key_padding_mask = false;
  bool is_causal = false;
  int64_t num_layers = 2;  // encoder only
  bool final_norm = true;  // encoder only
  bool torch_init = false;
};

std::vector<EncoderCase> encoder_cases() {
  std::vector<EncoderCase> c;
  c.push_back({.name = "post_norm_relu_masks", .src_mask = "float", .key_padding_mask = true});
  c.push_back({.name = "pre_norm_gelu_batch_first_causal",
               .options = {.dim_feedforward = 12,
                           .activation = "gelu",
                           .layer_norm_eps = 1e-6,
                           .batch_first = true,
                           .norm_first = true},
               .key_padding_mask = true,
               .is_causal = true});
  c.push_back({.name = "pre_norm_bool_mask",
               .nhead = 4,
               .options = {.dim_feedforward = 12, .norm_first = true},
               .src_mask = "bool"});
  c.push_back({.name = "unbatched", .batch = 0, .src_mask = "float"});
  c.push_back({.name = "encoder_stack_norm",
               .module = "encoder",
               .options = {.dim_feedforward = 12, .batch_first = true},
               .key_padding_mask = true});
  c.push_back({.name = "encoder_stack_pre_norm_no_final_norm",
               .module = "encoder",
               .options = {.dim_feedforward = 12, .activation = "gelu", .norm_first = true},
               .src_mask = "float",
               .num_layers = 3,
               .final_norm = false});
  c.push_back({.name = "torch_init_layer", .key_padding_mask = true, .torch_init = true});
  c.push_back({.name = "torch_init_encoder",
               .module = "encoder",
               .options = {.dim_feedforward = 12, .norm_first = true},
               .torch_init = true});
  for (EncoderCase f : {c[0], c[1], c[4]}) {
    f.name += "/float32";
    f.dtype = DType::Float32;
    c.push_back(f);
  }
  return c;
}

struct EncoderRun {
  EncoderCase spec;
  std::shared_ptr<Module> module = nullptr;
  Tensor src = {}, mask = {}, kpm = {}, grad_out = {};
  json request = {};

  Tensor forward() {
    if (auto* layer = dynamic_cast<TransformerEncoderLayer*>(module.get()))
      return layer->forward(src, mask, kpm, spec.is_causal);
    return dynamic_cast<TransformerEncoder&>(*module).forward(src, mask, kpm, spec.is_causal);
  }
};

EncoderRun prepare(const EncoderCase& c, uint64_t seed) {
  EncoderRun r{c};
  auto make_layer = [c] {
    return std::make_shared<TransformerEncoderLayer>(c.d_model, c.nhead, c.options);
  };
  if (c.module == "encoder")
    r.module = std::make_shared<TransformerEncoder>(
        make_layer, c.num_layers,
        c.final_norm ? std::make_shared<LayerNorm>(Shape{c.d_model}) : nullptr);
  else
    r.module = make_layer();
  r.module->to(c.dtype);
  r.module->eval();  // PyTorch's default dropout 0.1 is configured but inactive
  if (!c.torch_init) fill_parameters(*r.module, seed);
  const int64_t n = std::max<int64_t>(c.batch, 1), s = c.seq;
  Shape shape = c.batch == 0            ? Shape{s, c.d_model}
                : c.options.batch_first ? Shape{n, s, c.d_model}
                                        : Shape{s, n, c.d_model};
  r.src = sample_tensor(shape, seed + 100).to(c.dtype);
  r.src.set_requires_grad(true);
  if (c.src_mask == "float")
    r.mask = sample_tensor({s, s}, seed + 101, -1.0, 1.0).to(c.dtype);
  else if (c.src_mask == "bool")
    r.mask = bool_mask({s, s}, [](const auto& i) { return i[1] > 0 && (i[0] + i[1]) % 3 == 0; });
  if (c.key_padding_mask)
    r.kpm = bool_mask(c.batch == 0 ? Shape{s} : Shape{n, s}, [](const auto& i) {
      return i.size() == 2 && i[1] >= 5 - i[0];  // pads the end of the second sequence
    });
  r.grad_out = sample_tensor(shape, seed + 102).to(c.dtype);

  json& q = r.request;
  q["name"] = c.name;
  q["module"] = c.module;
  q["dtype"] = dtype_name(c.dtype);
  q["seed"] = seed;
  q["config"] = {{"d_model", c.d_model},
                 {"nhead", c.nhead},
                 {"dim_feedforward", c.options.dim_feedforward},
                 {"dropout", c.options.dropout},
                 {"activation", c.options.activation},
                 {"layer_norm_eps", c.options.layer_norm_eps},
                 {"batch_first", c.options.batch_first},
                 {"norm_first", c.options.norm_first},
                 {"num_layers", c.num_layers},
                 {"final_norm", c.final_norm}};
  q["state"] = c.torch_init ? json(nullptr) : state_json(*r.module);
  q["inputs"]["src"] = tensor_json(r.src);
  if (r.mask.defined()) q["inputs"]["src_mask"] = tensor_json(r.mask);
  if (r.kpm.defined()) q["inputs"]["src_key_padding_mask"] = tensor_json(r.kpm);
  q["options"] = {{"is_causal", c.is_causal}};
  q["grad_outputs"] = {{"output", tensor_json(r.grad_out)}};
  return r;
}

TEST(NnTransformer, MatchesTorchTransformerEncoder) {
  testing::compare_with_torch(
      encoder_cases(), 7, "transformer", prepare, [](EncoderRun& r, const json& ref) {
        const EncoderCase& c = r.spec;
        testing::ModuleParity parity(*r.module, ref, c.name, c.dtype, c.torch_init);
        Tensor out = r.forward();
        kiln::backward({out}, {r.grad_out});
        parity.check("output", out, ref["outputs"]["output"]);
        parity.check("src.grad", r.src.grad(), ref["input_grads"]["src"]);
        parity.check_param_grads_and_report();
      });
}

}  // namespace
}  // namespace kiln::nn
