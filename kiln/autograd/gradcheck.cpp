#include "kiln/autograd/gradcheck.h"

#include <algorithm>
#include <cmath>

#include "kiln/autograd/engine.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sample_data.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

// Element offsets (in storage elements) of every logical element of t, in row-major order.
std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offsets(static_cast<size_t>(t.numel()));
  std::vector<int64_t> idx(t.shape().size(), 0);
  int64_t off = t.storage_offset();
  for (auto& o : offsets) {
    o = off;
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.shape()[d]) {
        off += t.strides()[d];
        break;
      }
      off -= t.strides()[d] * (t.shape()[d] - 1);
      idx[d] = 0;
    }
  }
  return offsets;
}

std::vector<int> checked_inputs(const std::vector<Tensor>& inputs, const GradcheckOptions& o) {
  if (!o.inputs.empty()) return o.inputs;
  std::vector<int> out;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (is_floating(inputs[i].dtype())) out.push_back(static_cast<int>(i));
  return out;
}

// sum_j <v_j, out_j> over floating outputs, as a float64 number.
double projected(const std::vector<Tensor>& outs, const std::vector<Tensor>& v) {
  double total = 0;
  for (size_t j = 0; j < outs.size(); ++j) {
    if (!v[j].defined()) continue;
    std::vector<double> a = outs[j].to_vector<double>(), b = v[j].to_vector<double>();
    for (size_t k = 0; k < a.size(); ++k) total += a[k] * b[k];
  }
  return total;
}

}  // namespace

bool gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs,
               const GradcheckOptions& options, const Loc& loc) {
  std::vector<int> which = checked_inputs(inputs, options);
  // Leaves that share the caller's memory and layout, so strided inputs stay strided.
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) leaves.push_back(detach(t));
  for (int i : which) {
    if (leaves[i].dtype() != DType::Float64)
      fail("gradcheck", loc, "expected float64 inputs to check, but input {} is {}", i,
           leaves[i].describe());
    leaves[i].set_requires_grad(true);
  }
  std::vector<Tensor> outs = fn(leaves);
  // A floating output without history claims a zero derivative, which finite differences check
  // too (gradgradcheck of a linear function: its gradient is a constant).
  std::vector<Tensor> v, diff_outs, seeds;
  for (size_t j = 0; j < outs.size(); ++j) {
    bool floating = is_floating(outs[j].dtype());
    v.push_back(floating ? sample_tensor(outs[j].shape(), 1000 + j, 0.5, 1.5) : Tensor());
    if (floating && outs[j].requires_grad()) {
      diff_outs.push_back(outs[j]);
      seeds.push_back(to_dtype(v.back(), outs[j].dtype()));
    }
  }
  if (std::none_of(v.begin(), v.end(), [](const Tensor& t) { return t.defined(); }))
    fail("gradcheck", loc, "expected at least one floating-point output, but got none");
  std::vector<Tensor> checked;
  for (int i : which) checked.push_back(leaves[i]);
  std::vector<Tensor> analytic(checked.size());
  if (!diff_outs.empty()) analytic = grad(diff_outs, checked, seeds, false, false, true, loc);

  // Grad mode stays as the caller had it: gradgradcheck's fn itself needs gradients.
  for (size_t c = 0; c < which.size(); ++c) {
    Tensor& x = leaves[which[c]];
    double* base = static_cast<double*>(x.storage()->data());
    std::vector<int64_t> offsets = element_offsets(x);
    std::vector<double> got = analytic[c].defined() ? analytic[c].to_vector<double>()
                                                    : std::vector<double>(offsets.size(), 0.0);
    for (size_t k = 0; k < offsets.size(); ++k) {
      double orig = base[offsets[k]];
      base[offsets[k]] = orig + options.eps;
      double plus = projected(fn(leaves), v);
      base[offsets[k]] = orig - options.eps;
      double minus = projected(fn(leaves), v);
      base[offsets[k]] = orig;
      double numeric = (plus - minus) / (2 * options.eps);
      if (!(std::abs(got[k] - numeric) <= options.atol + options.rtol * std::abs(numeric)))
        fail("gradcheck", loc,
             "gradient mismatch for input {} ({}) at element {}: autograd gives {:.10g}, finite "
             "differences give {:.10g}",
             which[c], x.describe(), k, got[k], numeric);
    }
  }
  return true;
}

bool gradgradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs,
                   const GradcheckOptions& options, const Loc& loc) {
  std::vector<int> which = checked_inputs(inputs, options);
  TensorFn first_grad = [&](const std::vector<Tensor>& xs) {
    std::vector<Tensor> outs = fn(xs), diff_outs, seeds, wrt;
    for (size_t j = 0; j < outs.size(); ++j)
      if (is_floating(outs[j].dtype()) && outs[j].requires_grad()) {
        diff_outs.push_back(outs[j]);
        seeds.push_back(to_dtype(sample_tensor(outs[j].shape(), 2000 + j), outs[j].dtype()));
      }
    for (int i : which) wrt.push_back(xs[i]);
    if (diff_outs.empty()) return std::vector<Tensor>{};
    std::vector<Tensor> g = grad(diff_outs, wrt, seeds, true, true, true, loc);
    std::vector<Tensor> defined;
    for (const Tensor& t : g)
      if (t.defined()) defined.push_back(t);
    return defined;
  };
  return gradcheck(first_grad, inputs, options, loc);
}

}  // namespace kiln
