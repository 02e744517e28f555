#include "kiln/ops/factory_op.h"

#include "kiln/core/allocator.h"
#include "kiln/ops/dispatcher.h"

namespace kiln::detail {

nlohmann::json FactorySpec::json() const {
  nlohmann::json j = {{"dtype", dtype_name(options.dtype)},
                      {"device", options.device.name()},
                      {"channels_last", options.memory_format == MemoryFormat::kChannelsLast}};
  if (like)
    j["like"] = true;
  else
    j["shape"] = shape;
  return j;
}

FactorySpec FactorySpec::from_json(const Attrs& a) {
  FactorySpec s;
  s.like = a.has("like") && a.b("like");
  if (!s.like) s.shape = a.ints("shape");
  s.options.dtype = a.dtype("dtype");
  const std::string device = a.s("device");
  if (device == kCPU.name())
    s.options.device = kCPU;
  else if (device == kMeta.name())
    s.options.device = kMeta;
  else
    a.fail("device", "must be \"cpu\" or \"meta\", but is \"" + device + "\"");
  s.options.memory_format =
      a.b("channels_last") ? MemoryFormat::kChannelsLast : MemoryFormat::kContiguous;
  return s;
}

nlohmann::json FactoryOp::attrs() const {
  nlohmann::json j = spec_.json();
  j.update(extra_attrs());
  return j;
}

std::vector<TensorMeta> FactoryOp::infer(const std::vector<Tensor>& in, const Loc& loc) const {
  if (in.size() != (spec_.like ? 1u : 0u))
    fail(name(), loc, "expected {} input tensor{}, but got {}", spec_.like ? "one" : "no",
         spec_.like ? " (whose shape the output takes)" : "s", in.size());
  const Shape& shape = spec_.like ? in[0].shape() : spec_.shape;
  check_allocation(name(), shape, spec_.options, loc);
  return {{shape, spec_.options.dtype, spec_.options.device, spec_.options.memory_format}};
}

Tensor run_factory(const char* fn, const FactorySpec& spec, const OpPtr& op, const Loc& loc,
                   const Tensor& like) {
  KILN_INTERNAL_ASSERT(spec.like == like.defined(), "run_factory: a like spec needs its tensor");
  check_allocation(fn, spec.like ? like.shape() : spec.shape, spec.options, loc);
  Tensor t;
  try {
    t = spec.like ? dispatch1(op, {like}, loc) : dispatch1(op, {}, loc);
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(error_message(fn, e.detail(), loc), e.detail());
  }
  if (spec.options.requires_grad) t.set_requires_grad(true, loc);
  return t;
}

}  // namespace kiln::detail
