// Registry samples of channel_affine, defined in kiln/ops/channel_affine.cpp
// (Note [op registry]).
#include <string>
#include <vector>

#include "kiln/ops/norm.h"
#include "tests/samples/registry.h"

namespace kiln {

namespace {

KILN_REGISTER_OP_SAMPLES("channel_affine", [] {
  auto call = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{channel_affine(in[0], in[1], in[2])};
  };
  auto sample = [&](std::string label, Shape shape, uint64_t seed) {
    const int64_t ch = shape[1];
    std::string view = shape.size() == 2 ? "1, -1" : shape.size() == 3 ? "1, -1, 1" : "1, -1, 1, 1";
    return OpSample{std::move(label),
                    {sample_tensor(shape, seed), sample_tensor({ch}, seed + 1, 0.5, 2),
                     sample_tensor({ch}, seed + 2)},
                    call,
                    "a0 * a1.view(" + view + ") + a2.view(" + view + ")"};
  };
  std::vector<OpSample> s{sample("4d", {2, 3, 4, 5}, 361), sample("2d", {4, 3}, 364),
                          sample("3d_row_of_11", {2, 2, 11}, 367)};
  s.push_back({"transposed",
               {sample_tensor({3, 4}, 370).t(), sample_tensor({3}, 371), sample_tensor({3}, 372)},
               call,
               "a0 * a1.view(1, -1) + a2.view(1, -1)"});
  return s;
});

}  // namespace

}  // namespace kiln
