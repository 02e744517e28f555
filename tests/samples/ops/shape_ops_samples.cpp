// Registry samples of the ops defined in kiln/ops/shape_ops.cpp (Note [op registry]).
#include <optional>
#include <string>
#include <vector>

#include "kiln/ops/shape_ops.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
template <class F>
Fn one(F f) {
  return [f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; };
}

KILN_REGISTER_OP_SAMPLES("reshape", [] {
  return std::vector<OpSample>{
      {"contiguous",
       {sample_tensor({2, 6}, 11)},
       one([](const Tensor& x) {
         return reshape(x, {3, -1});
       }),
       "a0.reshape(3, -1)"},
      {"copying",
       {sample_tensor({4, 3}, 12).t()},
       one([](const Tensor& x) { return reshape(x, {12}); }),
       "a0.reshape(12)"},
      {"view",
       {sample_tensor({2, 3, 4}, 13)},
       one([](const Tensor& x) {
         return view(x, {6, 4});
       }),
       "a0.view(6, 4)"},
      {"squeeze_unsqueeze",
       {sample_tensor({2, 1, 3}, 14)},
       one([](const Tensor& x) { return unsqueeze(squeeze(x, 1), -1); }),
       "a0.squeeze(1).unsqueeze(-1)"},
      {"flatten",
       {sample_tensor({2, 3, 4}, 15)},
       one([](const Tensor& x) { return flatten(x, 1); }),
       "torch.flatten(a0, 1)"},
  };
});

KILN_REGISTER_OP_SAMPLES("view", [] {
  return std::vector<OpSample>{
      {"merge",
       {sample_tensor({2, 3, 4}, 16)},
       one([](const Tensor& x) {
         return view(x, {6, -1});
       }),
       "a0.view(6, -1)"},
  };
});

KILN_REGISTER_OP_SAMPLES("squeeze", [] {
  return std::vector<OpSample>{
      {"dim",
       {sample_tensor({2, 1, 3}, 17)},
       one([](const Tensor& x) { return squeeze(x, 1); }),
       "a0.squeeze(1)"},
      {"all",
       {sample_tensor({1, 3, 1}, 18)},
       one([](const Tensor& x) { return squeeze(x); }),
       "a0.squeeze()"},
  };
});

KILN_REGISTER_OP_SAMPLES("unsqueeze", [] {
  return std::vector<OpSample>{
      {"negative",
       {sample_tensor({2, 3}, 19)},
       one([](const Tensor& x) { return unsqueeze(x, -1); }),
       "a0.unsqueeze(-1)"},
  };
});

KILN_REGISTER_OP_SAMPLES("slice_backward", [] {
  return std::vector<OpSample>{
      {"step",
       {sample_tensor({2, 4}, 35)},
       one([](const Tensor& g) {
         return slice_backward(g, {5, 4}, 0, 1, 5, 2);
       }),
       "torch.ops.aten.slice_backward(a0, [5, 4], 0, 1, 5, 2)"},
  };
});

KILN_REGISTER_OP_SAMPLES("permute", [] {
  return std::vector<OpSample>{
      {"3d",
       {sample_tensor({2, 3, 4}, 21)},
       one([](const Tensor& x) {
         return permute(x, {2, 0, 1});
       }),
       "a0.permute(2, 0, 1)"},
      {"transpose",
       {sample_tensor({2, 3, 4}, 22)},
       one([](const Tensor& x) { return transpose(x, 0, -1); }),
       "a0.transpose(0, -1)"},
  };
});

KILN_REGISTER_OP_SAMPLES("slice", [] {
  return std::vector<OpSample>{
      {"step",
       {sample_tensor({5, 4}, 31)},
       one([](const Tensor& x) { return slice(x, 0, 1, 5, 2); }),
       "a0[1:5:2]"},
      {"negative",
       {sample_tensor({3, 6}, 32)},
       one([](const Tensor& x) { return slice(x, -1, -4, std::nullopt); }),
       "a0[..., -4:]"},
      {"narrow",
       {sample_tensor({3, 6}, 33)},
       one([](const Tensor& x) { return narrow(x, 1, 2, 3); }),
       "torch.narrow(a0, 1, 2, 3)"},
      {"select",
       {sample_tensor({3, 4, 2}, 34)},
       one([](const Tensor& x) { return select(x, 1, -1); }),
       "a0.select(1, -1)"},
  };
});

KILN_REGISTER_OP_SAMPLES("expand", [] {
  return std::vector<OpSample>{
      {"leading",
       {sample_tensor({3, 1}, 41)},
       one([](const Tensor& x) {
         return expand(x, {2, 3, 4});
       }),
       "a0.expand(2, 3, 4)"},
      {"keep",
       {sample_tensor({1, 3}, 42)},
       one([](const Tensor& x) {
         return broadcast_to(x, {5, -1});
       }),
       "a0.expand(5, -1)"},
  };
});

KILN_REGISTER_OP_SAMPLES("unflatten", [] {
  return std::vector<OpSample>{
      {"last_dim",
       {sample_tensor({2, 12}, 49)},
       one([](const Tensor& x) {
         return unflatten(x, -1, {3, 4});
       }),
       "a0.unflatten(-1, (3, 4))"},
      {"inferred_size_of_a_transpose",
       {sample_tensor({6, 5}, 50)},
       one([](const Tensor& x) {
         return unflatten(x.t(), 1, {-1, 2});
       }),
       "a0.t().unflatten(1, (-1, 2))"},
      {"empty_batch",
       {sample_tensor({0, 6}, 51)},
       one([](const Tensor& x) {
         return unflatten(x, 1, {2, 3});
       }),
       "a0.unflatten(1, (2, 3))"},
  };
});

KILN_REGISTER_OP_SAMPLES("flatten", [] {
  return std::vector<OpSample>{
      {"from_dim_1",
       {sample_tensor({2, 3, 4}, 45)},
       one([](const Tensor& x) { return flatten(x, 1); }),
       "a0.flatten(1)"},
      {"middle",
       {sample_tensor({2, 3, 4, 5}, 46)},
       one([](const Tensor& x) { return flatten(x, 1, 2); }),
       "a0.flatten(1, 2)"},
      {"of_a_transpose_copies",
       {sample_tensor({3, 4}, 47)},
       one([](const Tensor& x) { return flatten(x.t()); }),
       "a0.t().flatten()"},
      {"zero_dim",
       {sample_tensor({}, 48)},
       one([](const Tensor& x) { return flatten(x); }),
       "a0.flatten()"},
  };
});

// Not differentiable (Note [detach]): the output requires no grad, so gradcheck has nothing to do.
KILN_REGISTER_OP_SAMPLES("detach", [] {
  std::vector<OpSample> s{
      {"plain",
       {sample_tensor({2, 3}, 43)},
       one([](const Tensor& x) { return detach(x); }),
       "a0.detach()"},
      {"of_a_view",
       {sample_tensor({3, 4}, 44)},
       one([](const Tensor& x) { return detach(x.t()); }),
       "a0.t().detach()"},
  };
  for (OpSample& sample : s) sample.check_grad = false;
  return s;
});

}  // namespace

}  // namespace kiln
