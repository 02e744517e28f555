// Registry samples of batch_norm, layer_norm and group_norm, defined in kiln/ops/norm.cpp
// (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/shape_ops.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

using Fn = OpSample::Fn;

std::vector<Tensor> one(Tensor t) {
  return {std::move(t)};
}

// Running statistics are cloned inside the sample so that gradcheck's many calls do not
// compound their updates. The updated statistics depend on x without a gradient (as in
// PyTorch), which finite differences would flag, so only the check_grad = false sample returns
// them (their values are compared with PyTorch's; its lambda takes every tensor as an argument
// because an eval'd lambda sees only globals).
Fn batch_norm_train(double momentum, double eps, bool stats, bool affine, bool return_stats) {
  return [=](const std::vector<Tensor>& in) {
    Tensor rm = stats ? clone(detach(in[1])) : Tensor();
    Tensor rv = stats ? clone(detach(in[2])) : Tensor();
    const size_t k = stats ? 3 : 1;
    Tensor y = batch_norm(in[0], rm, rv, affine ? in[k] : Tensor(), affine ? in[k + 1] : Tensor(),
                          true, momentum, eps);
    return return_stats ? std::vector<Tensor>{y, rm, rv} : one(y);
  };
}

std::vector<Tensor> batch_norm_inputs(Shape x_shape, uint64_t seed) {
  const Shape c{x_shape[1]};
  return {sample_tensor(x_shape, seed, -2, 2), sample_tensor(c, seed + 1),
          sample_tensor(c, seed + 2, 0.5, 2), sample_tensor(c, seed + 3, 0.5, 1.5),
          sample_tensor(c, seed + 4)};
}

KILN_REGISTER_OP_SAMPLES("batch_norm", [] {
  OpSample stats{
      "running_stats_update", batch_norm_inputs({4, 3, 2}, 300),
      batch_norm_train(0.2, 1e-5, true, true, true),
      "(lambda x, rm, rv, w, b: (F.batch_norm(x, rm, rv, w, b, training=True, "
      "momentum=0.2, eps=1e-5), rm, rv))(a0, a1.detach().clone(), a2.detach().clone(), a3, a4)"};
  stats.check_grad = false;
  return std::vector<OpSample>{
      {"train_4d",
       batch_norm_inputs({3, 2, 2, 2}, 305),
       batch_norm_train(0.1, 1e-5, true, true, false),
       "F.batch_norm(a0, a1.detach().clone(), a2.detach().clone(), a3, a4, training=True, "
       "momentum=0.1, eps=1e-5)",
       {0, 3, 4}},
      {"train_2d_eps",
       batch_norm_inputs({5, 3}, 310),
       batch_norm_train(0.3, 1e-3, true, true, false),
       "F.batch_norm(a0, a1.detach().clone(), a2.detach().clone(), a3, a4, training=True, "
       "momentum=0.3, eps=1e-3)",
       {0, 3, 4}},
      {"train_3d_no_stats_no_affine",
       {sample_tensor({4, 3, 2}, 315, -2, 2)},
       batch_norm_train(0.1, 1e-5, false, false, false),
       "F.batch_norm(a0, None, None, training=True)"},
      {"eval",
       batch_norm_inputs({2, 3, 2, 2}, 320),
       [](const std::vector<Tensor>& in) {
         // Running statistics are buffers: they never require grad.
         return one(batch_norm(in[0], detach(in[1]), detach(in[2]), in[3], in[4], false));
       },
       "F.batch_norm(a0, a1.detach(), a2.detach(), a3, a4, training=False)",
       {0, 3, 4}},
      stats,
  };
});

KILN_REGISTER_OP_SAMPLES("layer_norm", [] {
  return std::vector<OpSample>{
      {"last_dim",
       {sample_tensor({2, 3, 4}, 321, -2, 2), sample_tensor({4}, 322, 0.5, 1.5),
        sample_tensor({4}, 323)},
       [](const std::vector<Tensor>& in) { return one(layer_norm(in[0], {4}, in[1], in[2])); },
       "F.layer_norm(a0, (4,), a1, a2)"},
      {"two_dims_eps",
       {sample_tensor({2, 3, 4}, 324, -2, 2), sample_tensor({3, 4}, 325, 0.5, 1.5),
        sample_tensor({3, 4}, 326)},
       [](const std::vector<Tensor>& in) {
         return one(layer_norm(in[0], {3, 4}, in[1], in[2], 1e-3));
       },
       "F.layer_norm(a0, (3, 4), a1, a2, eps=1e-3)"},
      {"transposed_no_affine",
       {sample_tensor({4, 3}, 327, -2, 2).t()},
       [](const std::vector<Tensor>& in) { return one(layer_norm(in[0], {4})); },
       "F.layer_norm(a0, (4,))"},
  };
});

KILN_REGISTER_OP_SAMPLES("group_norm", [] {
  return std::vector<OpSample>{
      {"3d",
       {sample_tensor({2, 4, 3}, 331, -2, 2), sample_tensor({4}, 332, 0.5, 1.5),
        sample_tensor({4}, 333)},
       [](const std::vector<Tensor>& in) { return one(group_norm(in[0], 2, in[1], in[2])); },
       "F.group_norm(a0, 2, a1, a2)"},
      {"4d_eps",
       {sample_tensor({2, 6, 2, 2}, 334, -2, 2), sample_tensor({6}, 335, 0.5, 1.5),
        sample_tensor({6}, 336)},
       [](const std::vector<Tensor>& in) { return one(group_norm(in[0], 3, in[1], in[2], 1e-3)); },
       "F.group_norm(a0, 3, a1, a2, eps=1e-3)"},
      {"one_group_no_affine",
       {sample_tensor({1, 4, 5}, 337, -2, 2)},
       [](const std::vector<Tensor>& in) { return one(group_norm(in[0], 1)); },
       "F.group_norm(a0, 1)"},
  };
});

}  // namespace

}  // namespace kiln
