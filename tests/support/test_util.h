#pragma once
// Helpers shared by the test suites.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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

// Expects fn to throw a kiln::Error whose text contains every piece of `parts`.
template <class F>
void expect_error(F fn, const std::vector<std::string>& parts) {
  expect_contains(error_of(fn), parts);
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

// Same shape, and every element within tol * (1 + |want|) of want.
inline void expect_allclose(const Tensor& got, const Tensor& want, double tol) {
  ASSERT_EQ(got.shape(), want.shape());
  std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], tol * (1 + std::abs(b[i]))) << "at " << i;
}

// Same shape and dtype, and the same values bit for bit (compared as doubles, which hold every
// float32 value exactly).
inline void expect_bit_identical(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  if (a.empty()) return;  // memcmp of two null pointers is undefined even for 0 bytes
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)), 0);
}

// 0, 1, 2, ... (from `start`) laid out in `shape`.
inline Tensor iota(Shape shape, double start = 0, DType dt = DType::Float32) {
  return arange(start, start + static_cast<double>(shape_numel(shape)), 1.0, TensorOptions{dt})
      .reshape(shape);
}

}  // namespace kiln::test
