#pragma once
// Helpers shared by the test suites.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "kiln/ops/factories.h"

namespace kiln::test {

// The message of the kiln::Error that fn throws; records a test failure when it throws nothing
// or another exception.
template <class F>
std::string error_of(F fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected kiln::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected kiln::Error";
  return "";
}

inline void expect_contains(const std::string& what, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << p << " in: " << what;
}

// A float64 leaf that requires grad.
inline Tensor leaf(std::initializer_list<double> v) {
  Tensor t = tensor(v, {DType::Float64});
  t.set_requires_grad(true);
  return t;
}

inline void expect_values(const Tensor& t, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_TRUE(t.defined());
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

}  // namespace kiln::test
