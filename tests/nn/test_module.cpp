#include <gtest/gtest.h>

#include <string>

#include "kiln/core/grad_mode.h"
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/module.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/reduce.h"
#include "tests/support/test_util.h"

namespace kiln::nn {
namespace {

class Net : public Module {
 public:
  Net(int64_t hidden = 128) : Module("Net") {
    features =
        register_module("features", std::make_shared<Sequential>(std::make_shared<Conv2d>(1, 4, 3),
                                                                 std::make_shared<BatchNorm2d>(4),
                                                                 std::make_shared<ReLU>()));
    fc = register_module("fc", std::make_shared<Linear>(hidden, 10));
  }
  std::shared_ptr<Sequential> features;
  std::shared_ptr<Linear> fc;
};

std::vector<std::string> keys(const StateDict& d) {
  std::vector<std::string> out;
  for (const auto& [name, t] : d) out.push_back(name);
  return out;
}

using test::error_of;

TEST(NnModule, NamesAreDottedAndInInsertionOrder) {
  Net net;
  EXPECT_EQ(keys(net.named_parameters()),
            (std::vector<std::string>{"features.0.weight", "features.0.bias", "features.1.weight",
                                      "features.1.bias", "fc.weight", "fc.bias"}));
  EXPECT_EQ(keys(net.named_buffers()),
            (std::vector<std::string>{"features.1.running_mean", "features.1.running_var",
                                      "features.1.num_batches_tracked"}));
  std::vector<std::string> modules;
  for (auto& [name, m] : net.named_modules()) modules.push_back(name + ":" + m->type_name());
  EXPECT_EQ(modules,
            (std::vector<std::string>{":Net", "features:Sequential", "features.0:Conv2d",
                                      "features.1:BatchNorm2d", "features.2:ReLU", "fc:Linear"}));
  EXPECT_EQ(net.named_modules()[0].first, "");
  EXPECT_EQ(net.named_modules()[2].first, "features.0");
  for (const Tensor& p : net.parameters()) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
  }
  EXPECT_EQ(net.num_parameters(), 4 * 9 + 4 + 4 + 4 + 128 * 10 + 10);
  // The layer's handle and the registered parameter are one tensor.
  EXPECT_TRUE(net.fc->weight.is_same(net.named_parameters()[4].second));
}

TEST(NnModule, RegistrationErrors) {
  Module m;
  m.register_parameter("w", zeros({2}));
  std::string dup = error_of([&] { m.register_buffer("w", zeros({2})); });
  EXPECT_NE(dup.find("[register_buffer]"), std::string::npos) << dup;
  EXPECT_NE(dup.find("'w' is already registered"), std::string::npos) << dup;
  EXPECT_NE(dup.find("test_module.cpp"), std::string::npos) << dup;

  Tensor leaf = ones({3}).set_requires_grad(true);
  Tensor non_leaf = mul(leaf, 2.0);
  std::string nl = error_of([&] { m.register_parameter("v", non_leaf); });
  EXPECT_NE(nl.find("[register_parameter] expected a leaf tensor"), std::string::npos) << nl;
  EXPECT_NE(nl.find("float32[3]"), std::string::npos) << nl;

  std::string dotted = error_of([&] { m.register_parameter("a.b", zeros({1})); });
  EXPECT_NE(dotted.find("without '.'"), std::string::npos) << dotted;
  std::string mod_dup = error_of([&] { m.register_module("w", std::make_shared<ReLU>()); });
  EXPECT_NE(mod_dup.find("already registered"), std::string::npos) << mod_dup;
}

TEST(NnModule, StateDictRoundTrip) {
  Net a, b;
  StateDict sd = a.state_dict();
  EXPECT_EQ(sd.size(), 9u);  // 6 parameters + 3 persistent buffers
  for (auto& [name, t] : sd) EXPECT_FALSE(t.requires_grad()) << name;
  b.load_state_dict(sd);
  StateDict sb = b.state_dict();
  for (size_t i = 0; i < sd.size(); ++i) {
    EXPECT_EQ(sd[i].first, sb[i].first);
    EXPECT_EQ(sd[i].second.to_vector<double>(), sb[i].second.to_vector<double>()) << sd[i].first;
  }
  // Loaded in place: b's layer handles see the values, and they stay parameters.
  EXPECT_EQ(b.fc->weight.to_vector<float>(), a.fc->weight.to_vector<float>());
  EXPECT_TRUE(b.fc->weight.requires_grad());
  EXPECT_TRUE(b.fc->weight.is_leaf());
}

TEST(NnModule, StateDictOrderMatchesPyTorch) {
  // torch.nn.Sequential(Conv2d, BatchNorm2d, ReLU).state_dict().keys(), per module: parameters
  // then buffers.
  Sequential seq(std::make_shared<Conv2d>(1, 2, 3), std::make_shared<BatchNorm2d>(2),
                 std::make_shared<ReLU>());
  EXPECT_EQ(keys(seq.state_dict()),
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                      "1.running_var", "1.num_batches_tracked"}));
}

TEST(NnModule, NonPersistentBufferIsNotInStateDict) {
  Module m;
  m.register_buffer("keep", zeros({2}));
  m.register_buffer("scratch", zeros({2}), /*persistent=*/false);
  EXPECT_EQ(keys(m.state_dict()), std::vector<std::string>{"keep"});
  EXPECT_EQ(keys(m.named_buffers()), (std::vector<std::string>{"keep", "scratch"}));
}

TEST(NnModule, LoadStateDictReportsAllProblemsAtOnce) {
  Net net;
  Net other(64);
  StateDict sd;
  for (auto& [name, t] : other.state_dict()) {
    if (name == "fc.bias")
      sd.emplace_back("fc.b", t);
    else
      sd.emplace_back(name, t);
  }
  std::string msg = error_of([&] { net.load_state_dict(sd); });
  EXPECT_NE(msg.find("[load_state_dict] missing keys: fc.bias; unexpected keys: fc.b; shape "
                     "mismatch: fc.weight expected [10, 128] but got [10, 64]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("test_module.cpp"), std::string::npos) << msg;

  // Non-strict loading ignores missing and unexpected keys but never a shape mismatch.
  StateDict partial{{"fc.bias", full({10}, 3.0)}, {"extra", zeros({1})}};
  net.load_state_dict(partial, /*strict=*/false);
  EXPECT_EQ(net.fc->bias.to_vector<float>(), std::vector<float>(10, 3.0f));
  EXPECT_THROW(net.load_state_dict({{"fc.bias", zeros({3})}}, false), Error);

  StateDict wrong_dtype = net.state_dict();
  wrong_dtype[0].second = zeros(wrong_dtype[0].second.shape(), {DType::Float64});
  std::string dt = error_of([&] { net.load_state_dict(wrong_dtype); });
  EXPECT_NE(dt.find("dtype mismatch: features.0.weight expected float32 but got float64"),
            std::string::npos)
      << dt;
}

TEST(NnModule, TrainEvalIsRecursiveAndDrivesDropout) {
  auto drop = std::make_shared<Dropout>(0.5);
  Sequential seq{std::make_shared<Linear>(4, 4), drop};
  EXPECT_TRUE(drop->is_training());
  Tensor x = ones({64, 16});
  Tensor y = (*drop)(x);
  std::vector<float> v = y.to_vector<float>();
  int zeros_seen = 0;
  for (float f : v) {
    EXPECT_TRUE(f == 0.0f || f == 2.0f);
    zeros_seen += f == 0.0f;
  }
  EXPECT_GT(zeros_seen, 300);
  EXPECT_LT(zeros_seen, 724);
  seq.eval();
  EXPECT_FALSE(seq.is_training());
  EXPECT_FALSE(drop->is_training());
  EXPECT_TRUE((*drop)(x).is_same(x));
  seq.train();
  EXPECT_TRUE(drop->is_training());
}

TEST(NnModule, BatchNormUsesRunningStatsOnlyInEval) {
  BatchNorm1d bn(2);
  Tensor x = tensor({1.0, 10.0, 3.0, 20.0, 5.0, 30.0}).reshape({3, 2});
  Tensor y = bn(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  std::vector<float> rm = bn.running_mean.to_vector<float>();
  EXPECT_NEAR(rm[0], 0.1 * 3.0, 1e-6);
  EXPECT_NEAR(rm[1], 0.1 * 20.0, 1e-6);
  std::vector<float> rv = bn.running_var.to_vector<float>();
  EXPECT_NEAR(rv[0], 0.9 + 0.1 * 4.0, 1e-5);  // unbiased batch variance 4
  // Training output is normalized by the batch statistics: column means are 0.
  std::vector<float> yv = y.to_vector<float>();
  EXPECT_NEAR(yv[0] + yv[2] + yv[4], 0.0, 1e-5);

  bn.eval();
  Tensor e = bn(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  EXPECT_EQ(bn.running_mean.to_vector<float>(), rm);
  std::vector<float> ev = e.to_vector<float>();
  EXPECT_NEAR(ev[0], (1.0 - rm[0]) / std::sqrt(rv[0] + 1e-5), 1e-5);
}

TEST(NnModule, GradientFlowsThroughSequentialMlp) {
  manual_seed(3);
  Sequential mlp{std::make_shared<Linear>(5, 8), std::make_shared<ReLU>(),
                 std::make_shared<Linear>(8, 8), std::make_shared<Tanh>(),
                 std::make_shared<Linear>(8, 3)};
  Tensor x = randn({4, 5});
  Tensor loss = sum(mlp(x));
  loss.backward();
  StateDict params = mlp.named_parameters();
  ASSERT_EQ(params.size(), 6u);
  for (auto& [name, p] : params) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().shape(), p.shape()) << name;
  }
  // The last bias gets d(sum)/db = batch size.
  EXPECT_EQ(params[5].second.grad().to_vector<float>(), std::vector<float>(3, 4.0f));
  mlp.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(params[5].second.grad().to_vector<float>(), std::vector<float>(3, 0.0f));
  mlp.zero_grad();
  EXPECT_FALSE(params[5].second.grad().defined());
}

TEST(NnModule, ToDtypeKeepsHandlesAndIntegerBuffers) {
  Net net;
  net.to(DType::Float64);
  EXPECT_EQ(net.fc->weight.dtype(), DType::Float64);
  EXPECT_TRUE(net.fc->weight.requires_grad());
  auto bn = std::dynamic_pointer_cast<BatchNorm2d>((*net.features)[1]);
  ASSERT_TRUE(bn);
  EXPECT_EQ(bn->running_var.dtype(), DType::Float64);
  EXPECT_EQ(bn->num_batches_tracked.dtype(), DType::Int64);
  Tensor y = net.fc->forward(ones({2, 128}, {DType::Float64}));
  EXPECT_EQ(y.dtype(), DType::Float64);
}

TEST(NnModule, ApplyVisitsChildrenFirst) {
  Net net;
  std::vector<std::string> order;
  net.apply([&](Module& m) { order.push_back(m.type_name()); });
  EXPECT_EQ(order, (std::vector<std::string>{"Conv2d", "BatchNorm2d", "ReLU", "Sequential",
                                             "Linear", "Net"}));
}

TEST(NnModule, ForwardHooksSeeOutputsAndCanBeRemoved) {
  Linear fc(3, 2);
  int calls = 0;
  int64_t id = fc.register_forward_hook([&](Module& m, const Tensor& in, const Tensor& out) {
    EXPECT_EQ(&m, &fc);
    EXPECT_EQ(in.shape(), (Shape{4, 3}));
    EXPECT_EQ(out.shape(), (Shape{4, 2}));
    ++calls;
  });
  fc(ones({4, 3}));
  fc.remove_forward_hook(id);
  fc(ones({4, 3}));
  EXPECT_EQ(calls, 1);
}

TEST(NnModule, ModuleListAndDict) {
  ModuleList list{std::make_shared<Linear>(2, 2), std::make_shared<Linear>(2, 3)};
  list.push_back(std::make_shared<ReLU>());
  EXPECT_EQ(list.size(), 3u);
  EXPECT_EQ(keys(list.named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"}));
  EXPECT_THROW(list(ones({1, 2})), Error);

  ModuleDict dict;
  dict.insert("enc", std::make_shared<Linear>(2, 2));
  dict.insert("act", std::make_shared<GELU>());
  EXPECT_TRUE(dict.contains("enc"));
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"enc", "act"}));
  EXPECT_EQ(dict["act"]->type_name(), "GELU");
  std::string msg = error_of([&] { dict.at("dec"); });
  EXPECT_NE(msg.find("[ModuleDict] expected one of the keys [enc, act], but got 'dec'"),
            std::string::npos)
      << msg;
  EXPECT_THROW(dict.insert("enc", std::make_shared<ReLU>()), Error);
}

}  // namespace
}  // namespace kiln::nn
