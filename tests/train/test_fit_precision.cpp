// Trainer::set_precision (Note [training precision]): bfloat16 and float16 training through
// autocast, float16's loss scaling in the epoch logs, predict's float32 outputs, and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "kiln/kiln.h"
#include "tests/support/toy_data.h"

namespace kiln::train {
namespace {

template <class F>
void test_error_contains(F fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Two identical MLPs with their own Adam: one trained eagerly, one by a compiled step, which the
// compiled-step tests hold against each other.
struct Twins {
  std::shared_ptr<nn::Module> eager_model, compiled_model;
  std::unique_ptr<optim::Adam> eager_opt, compiled_opt;
  explicit Twins(uint64_t seed) {
    for (auto* m : {&eager_model, &compiled_model}) {
      manual_seed(seed);
      *m = nn::mlp(2, {16}, 2);
    }
    eager_opt =
        std::make_unique<optim::Adam>(eager_model->parameters(), optim::AdamOptions{.lr = 1e-2});
    compiled_opt =
        std::make_unique<optim::Adam>(compiled_model->parameters(), optim::AdamOptions{.lr = 1e-2});
  }
  // The compiled model's parameters are float32 and within tol of the eager one's.
  void expect_parameters_close(double tol) const {
    const auto pe = eager_model->parameters(), pc = compiled_model->parameters();
    for (size_t i = 0; i < pe.size(); ++i) {
      EXPECT_EQ(pc[i].dtype(), DType::Float32);
      const std::vector<float> a = pe[i].to_vector<float>(), b = pc[i].to_vector<float>();
      for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], tol) << i << "," << k;
    }
  }
};

data::DataLoader loader(int64_t n, uint32_t seed) {
  return data::DataLoader(test::separable(n, seed),
                          data::DataLoaderOptions{.batch_size = 32, .shuffle = true, .seed = 1});
}

struct Rig {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Adam> opt;
  Trainer trainer;
  Rig() {
    manual_seed(2);
    model = nn::mlp(2, {16}, 2);
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-2});
    trainer.compile(*model, *opt,
                    [](const Tensor& logits, const Tensor& y) { return cross_entropy(logits, y); },
                    {"accuracy"});
  }
};

TEST(FitPrecision, PrecisionNamesAndKerasAliases) {
  EXPECT_EQ(parse_precision("bf16"), Precision::kBFloat16);
  EXPECT_EQ(parse_precision("mixed_bfloat16"), Precision::kBFloat16);
  EXPECT_EQ(parse_precision("mixed_float16"), Precision::kFloat16);
  EXPECT_EQ(parse_precision("float32"), Precision::kFloat32);
  EXPECT_THROW(parse_precision("int8"), Error);
  EXPECT_STREQ(precision_policy_name(Precision::kFloat16), "mixed_float16");
  EXPECT_EQ(precision_compute_dtype(Precision::kBFloat16), DType::BFloat16);
  EXPECT_FALSE(precision_compute_dtype(Precision::kFloat32).has_value());
}

TEST(FitPrecision, Bfloat16TrainsLikeFloat32AndPredictsFloat32) {
  data::DataLoader train = loader(512, 1), test = loader(256, 2);
  Rig f32, bf16;
  bf16.trainer.set_precision(Precision::kBFloat16, /*force=*/true);
  EXPECT_TRUE(bf16.trainer.low_precision_active());
  EXPECT_EQ(bf16.trainer.grad_scaler(), nullptr) << "bfloat16 needs no loss scaling";
  f32.trainer.fit(train, {.epochs = 4, .verbose = false});
  bf16.trainer.fit(train, {.epochs = 4, .verbose = false});
  const double acc32 = f32.trainer.evaluate(test)["accuracy"];
  const double acc16 = bf16.trainer.evaluate(test)["accuracy"];
  EXPECT_GT(acc16, 0.9);
  EXPECT_NEAR(acc16, acc32, 0.05);
  for (const Tensor& p : bf16.model->parameters()) EXPECT_EQ(p.dtype(), DType::Float32);
  EXPECT_EQ(bf16.trainer.predict(test).dtype(), DType::Float32);
}

TEST(FitPrecision, Float16ScalesTheLossAndLogsTheScale) {
  data::DataLoader train = loader(256, 3);
  Rig rig;
  rig.trainer.set_precision(Precision::kFloat16, /*force=*/true);
  ASSERT_NE(rig.trainer.grad_scaler(), nullptr);
  const History h = rig.trainer.fit(train, {.epochs = 2, .verbose = false});
  ASSERT_TRUE(h.metrics.count("loss_scale"));
  ASSERT_TRUE(h.metrics.count("skipped_steps"));
  EXPECT_EQ(h.metrics.at("loss_scale").back(), rig.trainer.grad_scaler()->get_scale());
  EXPECT_EQ(h.metrics.at("skipped_steps").back(), 0.0) << "a toy problem never overflows";
  EXPECT_LT(h.metrics.at("loss").back(), h.metrics.at("loss").front());
}

TEST(FitPrecision, WithoutNativeKernelsFloat16StaysFloat32WithoutScaling) {
  setenv("KILN_NATIVE_LOW_PRECISION", "0", 1);
  data::DataLoader train = loader(128, 4);
  Rig rig;
  rig.trainer.set_precision(Precision::kFloat16);
  EXPECT_FALSE(rig.trainer.low_precision_active());
  const History h = rig.trainer.fit(train, {.epochs = 1, .verbose = false});
  unsetenv("KILN_NATIVE_LOW_PRECISION");
  EXPECT_FALSE(h.metrics.count("loss_scale"));
}

TEST(FitPrecision, CompiledFloat16WithoutAScalerIsRefused) {
  nn::Linear layer(2, 2);
  optim::SGD sgd(layer.parameters(), {.lr = 0.1});
  test_error_contains(
      [&] {
        compile_train_step(layer,
                           [](const Tensor& l, const Tensor& y) { return cross_entropy(l, y); },
                           sgd, {.autocast_dtype = DType::Float16});
      },
      "grad_scaler");
}

// Note [loss scaling in compiled steps]: a compiled float16 step with a GradScaler steps, skips
// and rescales as the eager float16 step does: the same losses, the same scale after every step,
// the same skipped steps (an overflowing first scale is planted), and parameters that stay
// together; gradients leave the graph scaled and the scaler unscales them.
TEST(FitPrecision, CompiledFloat16StepScalesAsTheEagerOne) {
  Twins twins(12);
  auto &eager_model = twins.eager_model, &compiled_model = twins.compiled_model;
  optim::Adam &eager_opt = *twins.eager_opt, &compiled_opt = *twins.compiled_opt;
  // 2^20 overflows float16 (max 65504) in the first backward: a skipped step, then back-offs,
  // and growth every 3 clean steps overflows again.
  const optim::GradScalerOptions so{.init_scale = std::ldexp(1.0, 20), .growth_interval = 3};
  optim::GradScaler eager_scaler(so), compiled_scaler(so);
  auto ce = [](const Tensor& l, const Tensor& y) { return cross_entropy(l, y); };
  AutocastOptions force;
  force.force = true;
  CompiledStep step = compile_train_step(*compiled_model, ce, compiled_opt,
                                         {.autocast_dtype = DType::Float16,
                                          .autocast_options = force,
                                          .grad_scaler = &compiled_scaler});
  auto data = test::separable(128, 13);
  const std::vector<float> first = compiled_model->parameters()[0].to_vector<float>();
  for (int i = 0; i < 16; ++i) {
    const Tensor x = narrow(data->data(), 0, 8 * i, 8), y = narrow(data->target(), 0, 8 * i, 8);
    eager_opt.zero_grad();
    Tensor eager_loss;
    {
      AutocastGuard region(DType::Float16, force);
      eager_loss = ce((*eager_model)(x), y);
    }
    eager_scaler.scale(eager_loss).backward();
    eager_scaler.step(eager_opt);
    eager_scaler.update();
    const CompiledStep::Result r = step(x, y);
    EXPECT_NEAR(r.loss.item(), eager_loss.item(), 1e-2 * std::abs(eager_loss.item()) + 1e-3)
        << "step " << i;
    EXPECT_EQ(compiled_scaler.get_scale(), eager_scaler.get_scale()) << "step " << i;
    EXPECT_EQ(compiled_scaler.skipped_steps(), eager_scaler.skipped_steps()) << "step " << i;
    if (i == 0) {
      EXPECT_EQ(compiled_scaler.skipped_steps(), 1) << "the planted overflow";
      EXPECT_EQ(compiled_model->parameters()[0].to_vector<float>(), first) << "skipped: unchanged";
    }
  }
  EXPECT_GT(compiled_scaler.skipped_steps(), 1);
  EXPECT_LT(compiled_scaler.skipped_steps(), 12) << "most steps must step";
  EXPECT_LT(compiled_scaler.get_scale(), std::ldexp(1.0, 20));
  twins.expect_parameters_close(2e-2);
  // One graph: a new scale is an input, not a retrace.
  ASSERT_NE(step.function(), nullptr);
  EXPECT_EQ(step.function()->stats().traces, 1);
}

TEST(FitPrecision, FitCompiledInFloat16) {
  data::DataLoader train = loader(256, 14), test = loader(128, 15);
  Rig rig;
  rig.trainer.set_precision(Precision::kFloat16, /*force=*/true);
  const History h = rig.trainer.fit(train, {.epochs = 4, .verbose = false, .compile = true});
  EXPECT_GT(rig.trainer.evaluate(test)["accuracy"], 0.9);
  ASSERT_TRUE(h.metrics.count("loss_scale"));
  EXPECT_EQ(h.metrics.at("loss_scale").back(), rig.trainer.grad_scaler()->get_scale());
}

// Note [autocast in compiled steps]: a compiled bfloat16 step trains as the eager bfloat16 step
// does, its graph casts each parameter once, and the parameters and gradients stay float32.
TEST(FitPrecision, CompiledBfloat16StepTrainsAsTheEagerOne) {
  Twins twins(9);
  auto &eager_model = twins.eager_model, &compiled_model = twins.compiled_model;
  optim::Adam &eager_opt = *twins.eager_opt, &compiled_opt = *twins.compiled_opt;
  auto ce = [](const Tensor& l, const Tensor& y) { return cross_entropy(l, y); };
  AutocastOptions force;
  force.force = true;
  CompiledStep step =
      compile_train_step(*compiled_model, ce, compiled_opt,
                         {.autocast_dtype = DType::BFloat16, .autocast_options = force});
  auto data = test::separable(64, 11);
  for (int i = 0; i < 6; ++i) {
    const Tensor x = narrow(data->data(), 0, 8 * i, 8), y = narrow(data->target(), 0, 8 * i, 8);
    eager_opt.zero_grad();
    Tensor eager_loss;
    {
      AutocastGuard region(DType::BFloat16, force);
      eager_loss = ce((*eager_model)(x), y);
    }
    eager_loss.backward();
    eager_opt.step();
    const CompiledStep::Result r = step(x, y);
    EXPECT_EQ(r.logits.dtype(), DType::BFloat16);
    EXPECT_NEAR(r.loss.item(), eager_loss.item(), 1e-2 * std::abs(eager_loss.item()) + 1e-3)
        << "step " << i;
  }
  twins.expect_parameters_close(2e-2);
  // One cast per parameter in the graph.
  ASSERT_NE(step.function(), nullptr);
  const auto graphs = step.function()->graphs();
  ASSERT_EQ(graphs.size(), 1u);
  const graph::Graph& g = *graphs[0];
  std::map<int, int> casts_of;  // capture value -> to_dtype nodes reading it
  for (const graph::Capture& c : g.captures) casts_of[c.value] = 0;
  int casts = 0;
  for (const graph::Node& n : g.nodes) {
    if (std::string(n.op->name()) != "to_dtype") continue;
    ++casts;
    auto it = casts_of.find(n.inputs[0]);
    if (it != casts_of.end()) ++it->second;
  }
  EXPECT_GT(casts, 0);
  int cast_params = 0;
  for (const graph::Capture& c : g.captures) {
    EXPECT_LE(casts_of[c.value], 1) << "capture " << c.value;
    cast_params += casts_of[c.value];
  }
  EXPECT_EQ(cast_params, 4) << "two weights and two biases";
}

TEST(FitPrecision, FitCompiledInBfloat16) {
  data::DataLoader train = loader(256, 6), test = loader(128, 7);
  Rig rig;
  rig.trainer.set_precision(Precision::kBFloat16, /*force=*/true);
  rig.trainer.fit(train, {.epochs = 4, .verbose = false, .compile = true});
  EXPECT_GT(rig.trainer.evaluate(test)["accuracy"], 0.9);
}

}  // namespace
}  // namespace kiln::train
