#pragma once
// The attributes of the random factory ops (rand, randn, randint, bernoulli) that their
// definitions (random_factories.cpp) and their CPU kernel (kiln/backend/cpu/random_ops.cpp, Note
// [kernel table]) both need: the distribution and the generator's state to draw from (Note
// [random ops]).
#include <cstdint>

#include "kiln/ops/op.h"

namespace kiln::detail {

enum class Dist { kUniform, kNormal, kRandint, kBernoulli };

struct Draw {
  uint64_t seed = 0, offset = 0;
  int64_t low = 0, high = 0;  // randint
  double p = 0.0;             // bernoulli: the probability of true
};

struct RandomAttrs {
  Dist dist = Dist::kUniform;
  Draw draw;
};
const RandomAttrs& random_attrs(const Op& op);

}  // namespace kiln::detail
