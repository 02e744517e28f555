#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "kiln/ops/factories.h"
#include "kiln/ops/sample_data.h"
#include "kiln/optim/clip.h"
#include "tests/optim/torch_reference.h"
#include "tests/support/test_util.h"

namespace kiln::optim {
namespace {

using nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();

using test::expect_error;

Tensor with_grad(std::vector<double> grad) {
  Tensor p = zeros({static_cast<int64_t>(grad.size())}, TensorOptions{DType::Float64});
  p.set_requires_grad(true);
  p.set_grad(tensor(grad, std::nullopt, TensorOptions{DType::Float64}));
  return p;
}

TEST(ClipGradNorm, ScalesWhenAboveMaxNorm) {
  Tensor a = with_grad({3.0, 0.0}), b = with_grad({4.0});
  Tensor total = clip_grad_norm_({a, b}, 1.0);
  EXPECT_DOUBLE_EQ(total.item(), 5.0);
  const double coef = 1.0 / (5.0 + 1e-6);
  EXPECT_NEAR(a.grad().to_vector<double>()[0], 3.0 * coef, 1e-15);
  EXPECT_NEAR(b.grad().to_vector<double>()[0], 4.0 * coef, 1e-15);
}

TEST(ClipGradNorm, LeavesSmallGradientsAlone) {
  Tensor a = with_grad({0.3, -0.4});
  Tensor no_grad = zeros({2}, TensorOptions{DType::Float64});
  no_grad.set_requires_grad(true);
  Tensor total = clip_grad_norm_({a, no_grad}, 1.0);
  EXPECT_NEAR(total.item(), 0.5, 1e-15);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0.3, -0.4}));
  EXPECT_FALSE(no_grad.grad().defined());
  EXPECT_EQ(clip_grad_norm_({no_grad}, 1.0).item(), 0.0);
}

TEST(ClipGradNorm, InfinityNormAndNonFinite) {
  Tensor a = with_grad({1.0, -7.0}), b = with_grad({2.0});
  EXPECT_EQ(clip_grad_norm_({a, b}, 100.0, kInf).item(), 7.0);
  Tensor c = with_grad({1.0, kInf});
  expect_error([&] { clip_grad_norm_({c}, 1.0, 2.0, true); },
               {"[clip_grad_norm_]", "finite total norm", "inf", "test_clip.cpp"});
  expect_error([&] { clip_grad_norm_({a}, 1.0, -1.0); }, {"[clip_grad_norm_]", "norm_type"});
}

TEST(ClipGradValue, ClampsEveryGradient) {
  Tensor a = with_grad({0.5, -2.0, 0.1});
  Tensor g = a.grad();
  clip_grad_value_({a}, 0.3);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0.3, -0.3, 0.1}));
  EXPECT_TRUE(a.grad().is_same(g));  // in place
}

TEST(ClipParity, MatchesTorch) {
  const std::vector<Shape> shapes = {{3, 4}, {5}, {2, 3}};
  struct Case {
    std::string mode;
    json args;
  };
  const std::vector<Case> cases = {
      {"norm", {{"max_norm", 0.5}}},
      {"norm", {{"max_norm", 100.0}}},
      {"norm", {{"max_norm", 1.0}, {"norm_type", 1.0}}},
      {"norm", {{"max_norm", 0.7}, {"norm_type", 3.0}}},
      {"norm", {{"max_norm", 0.2}, {"norm_type", "inf"}}},
      {"value", {{"clip_value", 0.3}}},
  };
  json requests = json::array();
  std::vector<double> totals;
  std::vector<std::vector<std::vector<double>>> clipped;
  std::vector<std::string> names;
  for (DType dt : {DType::Float64, DType::Float32}) {
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
      std::vector<Tensor> params;
      json grads = json::array();
      for (size_t i = 0; i < shapes.size(); ++i) {
        Tensor p = zeros(shapes[i], TensorOptions{dt});
        p.set_requires_grad(true);
        if (i == 1) {
          grads.push_back(nullptr);  // a parameter without a gradient is skipped
        } else {
          Tensor g = sample_tensor(shapes[i], 300 + i, -1.0, 1.0).to(dt);
          p.set_grad(g);
          grads.push_back(testing::tensor_json(g));
        }
        params.push_back(p);
      }
      double total = 0;
      if (c.mode == "norm") {
        double norm_type =
            c.args.contains("norm_type")
                ? (c.args["norm_type"].is_string() ? kInf : c.args["norm_type"].get<double>())
                : 2.0;
        Tensor t = clip_grad_norm_(params, c.args["max_norm"].get<double>(), norm_type);
        EXPECT_EQ(t.dtype(), dt);
        total = t.item();
      } else {
        clip_grad_value_(params, c.args["clip_value"].get<double>());
      }
      std::vector<std::vector<double>> after;
      for (const Tensor& p : params)
        after.push_back(p.grad().defined() ? p.grad().to_vector<double>() : std::vector<double>{});
      names.push_back(c.mode + "/" + c.args.dump() + "/" + dtype_name(dt));
      requests.push_back({{"kind", "clip"},
                          {"name", names.back()},
                          {"dtype", dtype_name(dt)},
                          {"mode", c.mode},
                          {"args", c.args},
                          {"grads", grads}});
      totals.push_back(total);
      clipped.push_back(after);
    }
  }
  json results = testing::run_torch_reference(requests, "clip");
  ASSERT_FALSE(results.is_null());
  ASSERT_EQ(results.size(), requests.size());
  for (size_t k = 0; k < results.size(); ++k) {
    double worst = 0;
    if (!results[k]["total_norm"].is_null()) {
      worst =
          testing::max_scaled_error({totals[k]}, {testing::decode_value(results[k]["total_norm"])});
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (results[k]["grads"][i].is_null()) {
        EXPECT_TRUE(clipped[k][i].empty()) << names[k];
        continue;
      }
      worst = std::max(worst, testing::max_scaled_error(
                                  clipped[k][i], testing::decode_values(results[k]["grads"][i])));
    }
    EXPECT_LE(worst, 1e-6) << names[k];
    std::printf("[ parity ] %-50s max scaled error %.3g\n", names[k].c_str(), worst);
  }
}

}  // namespace
}  // namespace kiln::optim
