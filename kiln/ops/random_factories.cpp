// rand, randn, randint and the bernoulli mask of dropout as ops (Note [random ops]).
#include <cstring>
#include <type_traits>

#include "kiln/core/parallel.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/factory_op.h"
#include "kiln/ops/loops.h"
#include "kiln/ops/op_factory.h"

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

enum class Dist { kUniform, kNormal, kRandint, kBernoulli };

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

// The largest value of a 16-bit float type below 1: rounding a float32 uniform such as
// 0.9999 to float16 gives exactly 1, which rand must never return.
template <class T>
T below_one() {
  T one(1.0f);
  one.bits = static_cast<uint16_t>(one.bits - 1);
  return one;
}

template <class T>
constexpr bool is_16bit_float = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

struct Draw {
  uint64_t seed = 0, offset = 0;
  int64_t low = 0, high = 0;  // randint
  double p = 0.0;             // bernoulli: the probability of true
};

bool wide(Dist d, DType dt, const Draw& draw) {
  if (d == Dist::kUniform) return dt == DType::Float64;
  if (d == Dist::kRandint)
    return static_cast<uint64_t>(draw.high) - static_cast<uint64_t>(draw.low) > (uint64_t{1} << 32);
  return false;
}

void fill(Dist dist, const Tensor& t, const Draw& d) {
  const int64_t n = t.numel();
  if (n == 0) return;
  Generator gen(d.seed);
  gen.set_offset(d.offset);
  const Loc loc = kernel_call_site();
  if (dist == Dist::kBernoulli) {
    // bool is one byte holding 0 or 1, exactly what fill_bernoulli writes.
    fill_bernoulli(static_cast<uint8_t*>(t.raw_data()), n, d.p, gen, loc);
    return;
  }
  if (dist == Dist::kRandint) {
    if (t.dtype() == DType::Int64) {
      fill_randint(t.data<int64_t>(), n, d.low, d.high, gen, loc);
      return;
    }
    std::vector<int64_t> buf(static_cast<size_t>(n));
    fill_randint(buf.data(), n, d.low, d.high, gen, loc);
    Tensor src = tensor(buf, t.shape());
    copy_into(t, src);
    return;
  }
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      T* p = static_cast<T*>(t.raw_data());
      if (dist == Dist::kUniform)
        fill_uniform(p, n, T(0), T(1), gen, loc);
      else
        fill_normal(p, n, T(0), T(1), gen, loc);
    } else if constexpr (is_16bit_float<T>) {
      std::vector<float> buf(static_cast<size_t>(n));
      if (dist == Dist::kUniform)
        fill_uniform(buf.data(), n, 0.0f, 1.0f, gen, loc);
      else
        fill_normal(buf.data(), n, 0.0f, 1.0f, gen, loc);
      const T top = below_one<T>();
      const bool uniform = dist == Dist::kUniform;
      T* p = static_cast<T*>(t.raw_data());
      parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          T v(buf[static_cast<size_t>(i)]);
          p[i] = uniform && static_cast<float>(v) >= 1.0f ? top : v;
        }
      });
    } else {
      KILN_INTERNAL_ASSERT(false, "a floating random fill reached a non-floating dtype");
    }
  });
}

class RandomOp final : public detail::FactoryOp {
 public:
  RandomOp(Dist dist, detail::FactorySpec spec, Draw draw)
      : FactoryOp(std::move(spec)), dist_(dist), draw_(draw) {}
  const char* name() const override { return dist_name(dist_); }
  nlohmann::json extra_attrs() const override {
    nlohmann::json j = {{"seed", draw_.seed}, {"offset", draw_.offset}};
    if (dist_ == Dist::kRandint) j.update({{"low", draw_.low}, {"high", draw_.high}});
    if (dist_ == Dist::kBernoulli) j["p"] = attr_double(draw_.p);
    return j;
  }
  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const DType dt = spec_.options.dtype;
    if ((dist_ == Dist::kUniform || dist_ == Dist::kNormal) && !is_floating(dt))
      fail(name(), loc, "expected a floating-point dtype, but got {}", dtype_name(dt));
    if (dist_ == Dist::kBernoulli && (dt != DType::Bool || !(draw_.p >= 0.0 && draw_.p <= 1.0)))
      fail(name(), loc, "expected a bool mask and 0 <= p <= 1, but got {} and p = {}",
           dtype_name(dt), draw_.p);
    if (dist_ == Dist::kRandint && draw_.low >= draw_.high)
      fail(name(), loc, "expected low < high, but got low={}, high={}", draw_.low, draw_.high);
    return FactoryOp::infer(in, loc);
  }
  void kernel(const std::vector<Tensor>&, const std::vector<Tensor>& out) const override {
    fill(dist_, out[0], draw_);
  }

 private:
  Dist dist_;
  Draw draw_;
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

KILN_REGISTER_OP("rand", (OpSchema{{}, {"y"}}), make_random<Dist::kUniform>);
KILN_REGISTER_OP("randn", (OpSchema{{}, {"y"}}), make_random<Dist::kNormal>);
KILN_REGISTER_OP("randint", (OpSchema{{}, {"y"}}), make_random<Dist::kRandint>);
KILN_REGISTER_OP("bernoulli", (OpSchema{{}, {"mask"}}), make_random<Dist::kBernoulli>);

// Checks, reserves the blocks (not on meta), and dispatches; errors name `fn`.
Tensor run_random(const char* fn, Dist dist, Shape shape, TensorOptions options, Draw draw,
                  Generator* gen, const Loc& loc) {
  if ((dist == Dist::kUniform || dist == Dist::kNormal) && !is_floating(options.dtype))
    fail(fn, loc, "expected a floating-point dtype, but got {}", dtype_name(options.dtype));
  detail::check_allocation(fn, shape, options, loc);
  RandomOp(dist, {shape, options}, draw).infer({}, loc);  // errors before the generator moves
  Generator& g = gen ? *gen : default_generator();
  const int64_t n = shape_numel(shape);
  Generator::State s =
      options.device.is_meta()
          ? g.get_state()
          : g.reserve_with_seed(random_blocks(n, wide(dist, options.dtype, draw)), loc);
  draw.seed = s.seed;
  draw.offset = s.offset;
  detail::FactorySpec spec{std::move(shape), options};
  return detail::run_factory(fn, spec, std::make_shared<const RandomOp>(dist, spec, draw), loc);
}

}  // namespace

Tensor rand(Shape shape, TensorOptions options, Generator* gen, const Loc& loc) {
  return run_random("rand", Dist::kUniform, std::move(shape), options, {}, gen, loc);
}

Tensor randn(Shape shape, TensorOptions options, Generator* gen, const Loc& loc) {
  return run_random("randn", Dist::kNormal, std::move(shape), options, {}, gen, loc);
}

Tensor rand_like(const Tensor& like, Generator* gen) {
  return run_random("rand_like", Dist::kUniform, like.shape(), {like.dtype(), like.device()}, {},
                    gen, Loc::current());
}

Tensor randn_like(const Tensor& like, Generator* gen) {
  return run_random("randn_like", Dist::kNormal, like.shape(), {like.dtype(), like.device()}, {},
                    gen, Loc::current());
}

Tensor randint(int64_t low, int64_t high, Shape shape, TensorOptions options, Generator* gen,
               const Loc& loc) {
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

}  // namespace kiln
