// rand, randn, randint and the bernoulli mask of dropout as ops (Note [random ops]). Their CPU
// kernel, which draws the numbers, is in kiln/backend/cpu/random_ops.cpp (Note [kernel table]).
#include "kiln/core/rng.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/factory_op.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/random_ops.h"

namespace kiln {

// Note [random ops]
// ~~~~~~~~~~~~~~~~~
// A random factory reserves its blocks of the generator's stream when it is called (Note
// [random streams]) and dispatches an op whose attrs hold the generator's (seed, offset) at that
// point. The op's kernel draws from a private generator set to that state, so it computes the
// numbers the fill would have drawn from the caller's generator, bit for bit, and a recorded
// random op replays to the same numbers; a new call reserves new blocks and draws fresh ones. On
// meta nothing is reserved (the generator is untouched) and the attrs record where the stream
// stands.

namespace {

using detail::Dist;
using detail::Draw;

const char* dist_name(Dist d) {
  switch (d) {
    case Dist::kUniform:
      return "rand";
    case Dist::kNormal:
      return "randn";
    case Dist::kRandint:
      return "randint";
    case Dist::kBernoulli:
      return "bernoulli";
  }
  return "random";
}

bool wide(Dist d, DType dt, const Draw& draw) {
  if (d == Dist::kUniform) return dt == DType::Float64;
  if (d == Dist::kRandint)
    return static_cast<uint64_t>(draw.high) - static_cast<uint64_t>(draw.low) > (uint64_t{1} << 32);
  return false;
}

class RandomOp final : public detail::FactoryOp {
 public:
  RandomOp(Dist dist, detail::FactorySpec spec, Draw draw)
      : FactoryOp(std::move(spec)), a_{dist, draw} {}
  const detail::RandomAttrs& random_attrs() const { return a_; }
  const char* name() const override { return dist_name(a_.dist); }
  nlohmann::json extra_attrs() const override {
    nlohmann::json j = {{"seed", a_.draw.seed}, {"offset", a_.draw.offset}};
    if (a_.dist == Dist::kRandint) j.update({{"low", a_.draw.low}, {"high", a_.draw.high}});
    if (a_.dist == Dist::kBernoulli) j["p"] = attr_double(a_.draw.p);
    return j;
  }
  // Note [random effects].
  bool draws_random() const override { return true; }
  uint64_t random_blocks(const std::vector<TensorMeta>& outputs) const override {
    return kiln::random_blocks(shape_numel(outputs.at(0).shape),
                               wide(a_.dist, spec_.options.dtype, a_.draw));
  }
  OpPtr at_stream(uint64_t seed, uint64_t offset) const override {
    Draw d = a_.draw;
    d.seed = seed;
    d.offset = offset;
    return std::make_shared<const RandomOp>(a_.dist, spec_, d);
  }
  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const DType dt = spec_.options.dtype;
    if ((a_.dist == Dist::kUniform || a_.dist == Dist::kNormal) && !is_floating(dt))
      fail(name(), loc, "expected a floating-point dtype, but got {}", dtype_name(dt));
    if (a_.dist == Dist::kBernoulli &&
        (dt != DType::Bool || !(a_.draw.p >= 0.0 && a_.draw.p <= 1.0)))
      fail(name(), loc, "expected a bool mask and 0 <= p <= 1, but got {} and p = {}",
           dtype_name(dt), a_.draw.p);
    if (a_.dist == Dist::kRandint && a_.draw.low >= a_.draw.high)
      fail(name(), loc, "expected low < high, but got low={}, high={}", a_.draw.low, a_.draw.high);
    return FactoryOp::infer(in, loc);
  }

 private:
  detail::RandomAttrs a_;
};

template <Dist kDist>
OpPtr make_random(const Attrs& a) {
  Draw d;
  d.seed = a.u64("seed");
  d.offset = a.u64("offset");
  if (kDist == Dist::kRandint) d.low = a.i("low"), d.high = a.i("high");
  if (kDist == Dist::kBernoulli) d.p = a.f("p");
  return std::make_shared<const RandomOp>(kDist, detail::FactorySpec::from_json(a), d);
}

KILN_REGISTER_OP("rand", (OpSchema{{"like?"}, {"y"}, AutocastPolicy::kKeep}),
                 make_random<Dist::kUniform>);
KILN_REGISTER_OP("randn", (OpSchema{{"like?"}, {"y"}, AutocastPolicy::kKeep}),
                 make_random<Dist::kNormal>);
KILN_REGISTER_OP("randint", (OpSchema{{"like?"}, {"y"}, AutocastPolicy::kKeep}),
                 make_random<Dist::kRandint>);
KILN_REGISTER_OP("bernoulli", (OpSchema{{"like?"}, {"mask"}, AutocastPolicy::kKeep}),
                 make_random<Dist::kBernoulli>);

}  // namespace

const detail::RandomAttrs& detail::random_attrs(const Op& op) {
  const auto* r = dynamic_cast<const RandomOp*>(&op);
  KILN_INTERNAL_ASSERT(r != nullptr, std::string("random_attrs of op '") + op.name() + "'");
  return r->random_attrs();
}

namespace {

// Checks, reserves the blocks (not on meta), and dispatches; errors name `fn`.
// With `like` defined, the op takes its shape from it (Note [like factories]).
Tensor run_random(const char* fn, Dist dist, Shape shape, TensorOptions options, Draw draw,
                  Generator* gen, const Loc& loc, const Tensor& like = Tensor()) {
  if ((dist == Dist::kUniform || dist == Dist::kNormal) && !is_floating(options.dtype))
    fail(fn, loc, "expected a floating-point dtype, but got {}", dtype_name(options.dtype));
  const bool is_like = like.defined();
  if (is_like) shape = like.shape();
  detail::check_allocation(fn, shape, options, loc);
  // Errors before the generator moves.
  if (is_like)
    RandomOp(dist, {{}, options, true}, draw).infer({like}, loc);
  else
    RandomOp(dist, {shape, options}, draw).infer({}, loc);
  Generator& g = gen ? *gen : default_generator();
  const int64_t n = shape_numel(shape);
  // On meta, and while a trace records this thread's ops (randn({x.size(0), 3}) in a traced
  // function: the tracer runs no kernel, and the graph draws its own blocks on every run, Note
  // [random effects]), nothing is reserved.
  Generator::State s =
      options.device.is_meta() || kiln::detail::sizes_are_traced()
          ? g.get_state()
          : g.reserve_with_seed(random_blocks(n, wide(dist, options.dtype, draw)), loc);
  draw.seed = s.seed;
  draw.offset = s.offset;
  detail::FactorySpec spec{is_like ? Shape{} : std::move(shape), options, is_like};
  return detail::run_factory(fn, spec, std::make_shared<const RandomOp>(dist, spec, draw), loc,
                             like);
}

}  // namespace

Tensor rand(SizeList shape, TensorOptions options, Generator* gen, const Loc& loc) {
  const SymAttrScope sym("rand", shape.sym_attrs("/shape"));
  return run_random("rand", Dist::kUniform, shape.take(), options, {}, gen, loc);
}

Tensor randn(SizeList shape, TensorOptions options, Generator* gen, const Loc& loc) {
  const SymAttrScope sym("randn", shape.sym_attrs("/shape"));
  return run_random("randn", Dist::kNormal, shape.take(), options, {}, gen, loc);
}

Tensor rand_like(const Tensor& like, Generator* gen) {
  return run_random("rand_like", Dist::kUniform, {}, {like.dtype(), like.device()}, {}, gen,
                    Loc::current(), like);
}

Tensor randn_like(const Tensor& like, Generator* gen) {
  return run_random("randn_like", Dist::kNormal, {}, {like.dtype(), like.device()}, {}, gen,
                    Loc::current(), like);
}

Tensor randint(int64_t low, int64_t high, SizeList sizes, TensorOptions options, Generator* gen,
               const Loc& loc) {
  const SymAttrScope sym("randint", sizes.sym_attrs("/shape"));
  Shape shape = sizes.take();
  Draw d;
  d.low = low, d.high = high;
  return run_random("randint", Dist::kRandint, std::move(shape), options, d, gen, loc);
}

Tensor bernoulli_mask(Shape shape, double p, Device device, Generator* gen, const Loc& loc) {
  Draw d;
  d.p = p;
  return run_random("bernoulli", Dist::kBernoulli, std::move(shape), {DType::Bool, device}, d, gen,
                    loc);
}

Tensor bernoulli_mask_like(const Tensor& like, double p, Generator* gen, const Loc& loc) {
  Draw d;
  d.p = p;
  return run_random("bernoulli", Dist::kBernoulli, {}, {DType::Bool, like.device()}, d, gen, loc,
                    like);
}

}  // namespace kiln
