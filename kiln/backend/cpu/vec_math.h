#pragma once
// Vectorized transcendental functions over arrays, for the CPU kernels (Note [vectorized math]).
#include <cstdint>

namespace kiln::vmath {

// Note [vectorized math]
// ~~~~~~~~~~~~~~~~~~~~~~
// kiln's elementwise exp, log, tanh, erf, ... run SLEEF's vectorized functions (Debian's
// libsleef-dev, the library PyTorch's own CPU kernels use) instead of scalar libm, which the
// compiler cannot vectorize. The policy:
//  - Accuracy: SLEEF's 1.0-ulp variants (`_u10`) only. Results may differ from glibc's libm by
//    an ulp, never more than SLEEF's documented bound (tests/backend/test_vec_math.cpp measures
//    the error against a float64/long double reference over a sweep and the special values).
//  - One implementation, fixed at build time: the AVX2 + FMA variants (`..._u10avx2`), the ISA
//    kiln is compiled for, called directly rather than through SLEEF's CPU dispatcher, so a
//    result does not depend on which CPU the program runs on.
//  - A value's result does not depend on where it sits: a tail shorter than a vector is padded
//    into a full vector, so every element goes through the same vector code. The eager kernel of
//    an op and its tile inside a fused_elementwise chain therefore agree bit for bit, however the
//    elements are split into blocks and threads.
// y may equal x (in place); otherwise the arrays must not overlap.
void exp(const float* x, float* y, int64_t n);
void exp(const double* x, double* y, int64_t n);
void log(const float* x, float* y, int64_t n);
void log(const double* x, double* y, int64_t n);
void log1p(const float* x, float* y, int64_t n);
void log1p(const double* x, double* y, int64_t n);
void sin(const float* x, float* y, int64_t n);
void sin(const double* x, double* y, int64_t n);
void cos(const float* x, float* y, int64_t n);
void cos(const double* x, double* y, int64_t n);
void tanh(const float* x, float* y, int64_t n);
void tanh(const double* x, double* y, int64_t n);
void erf(const float* x, float* y, int64_t n);
void erf(const double* x, double* y, int64_t n);
// y[i] = x[i] ** e
void pow(const float* x, float e, float* y, int64_t n);
void pow(const double* x, double e, double* y, int64_t n);

}  // namespace kiln::vmath
