#include "kiln/ops/autocast.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/warning.h"
#include "kiln/ops/dispatch_mode.h"
#include "kiln/ops/dispatch_state.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace detail {

struct AutocastRegion {
  DType dtype;
  bool cache_enabled;
  AutocastRegion* parent;
  // A parameter's cast (Note [autocast]). `source` keeps the parameter alive, so its address is
  // not reused for another tensor while the entry exists; `mode` is the innermost pushed dispatch
  // mode when the cast was made, so a tracer started later makes (and records) its own cast.
  struct Cached {
    Tensor source;
    uint64_t version;
    const DispatchMode* mode;
    Tensor cast;
  };
  std::unordered_map<const TensorImpl*, Cached> cache;

  void clear_caches() {
    for (AutocastRegion* r = this; r; r = r->parent) r->cache.clear();
  }
};

namespace {
std::atomic<bool (*)(DType)> native_query{nullptr};

bool eligible(const Tensor& t) {
  if (!t.defined()) return false;
  const DType dt = t.dtype();
  return dt == DType::Float32 || dt == DType::BFloat16 || dt == DType::Float16;
}

const DispatchMode* top_mode() {
  const auto* stack = dispatch_tls.stack;
  return stack && !stack->empty() ? stack->back().get() : nullptr;
}

Tensor cast(AutocastRegion& region, const Tensor& t, DType to, const Loc& loc) {
  const bool cacheable = region.cache_enabled && to != DType::Float32 && t.is_leaf() &&
                         t.requires_grad() && !t.is_meta() && !t.is_view();
  if (!cacheable) return to_dtype(t, to, loc);
  const DispatchMode* mode = top_mode();
  auto it = region.cache.find(t.impl());
  // A cast made with grad mode off has no history; reused with grad mode on it would cut the
  // parameter off from its gradient.
  if (it != region.cache.end() && it->second.version == t.version() && it->second.mode == mode &&
      it->second.cast.dtype() == to && (it->second.cast.requires_grad() || !GradMode::is_enabled()))
    return it->second.cast;
  Tensor c = to_dtype(t, to, loc);
  region.cache[t.impl()] = AutocastRegion::Cached{t, t.version(), mode, c};
  return c;
}

// The dtype kPromote casts to: the widest floating dtype among the inputs (bfloat16 with float16
// gives float32, as in PyTorch); nullopt when they already agree.
std::optional<DType> promote_target(const std::vector<Tensor>& inputs) {
  std::optional<DType> widest;
  bool mixed = false;
  for (const Tensor& t : inputs) {
    // A C++ number (x * 0.5) is not an operand to widen to: as in PyTorch, where it is a Scalar.
    if (!t.defined() || !is_floating(t.dtype()) || t.impl()->is_wrapped_number_) continue;
    const DType dt = t.dtype();
    if (!widest) {
      widest = dt;
      continue;
    }
    if (dt == *widest) continue;
    mixed = true;
    widest = promote_types(*widest, dt);
  }
  if (!mixed) return std::nullopt;
  return widest;
}
}  // namespace

void set_native_low_precision_query(bool (*query)(DType)) {
  native_query.store(query);
}

namespace {
// An op's policy and, under kLowPrecision, which inputs go to float32 instead (bit i: input i).
struct PolicyInfo {
  AutocastPolicy policy = AutocastPolicy::kKeep;
  uint64_t float32_inputs = 0;
};

PolicyInfo policy_info(const OpDefinition& def) {
  PolicyInfo info{def.schema.autocast, 0};
  for (const std::string& name : def.schema.float32_inputs)
    for (size_t i = 0; i < def.schema.inputs.size() && i < 64; ++i) {
      std::string_view declared = def.schema.inputs[i];
      if (declared.ends_with('?')) declared.remove_suffix(1);
      if (declared == name) info.float32_inputs |= uint64_t{1} << i;
    }
  return info;
}

// policy_info of op's definition; every dispatch in a region asks, and the registry is a map
// keyed by std::string, so answers are kept per name pointer (names are static strings; the text
// is compared too, in case one is not).
PolicyInfo policy_info(const Op& op) {
  thread_local std::unordered_map<const char*, std::pair<std::string, PolicyInfo>> known;
  const char* name = op.name();
  auto it = known.find(name);
  if (it != known.end() && it->second.first == name) return it->second.second;
  const OpDefinition* def = find_op_definition(name);
  const PolicyInfo info = def ? policy_info(*def) : PolicyInfo{};
  known[name] = {name, info};
  return info;
}

std::optional<std::vector<Tensor>> cast_for_policy(AutocastRegion& region, PolicyInfo info,
                                                   const std::vector<Tensor>& inputs,
                                                   const Loc& loc) {
  const AutocastPolicy policy = info.policy;
  DType target;
  switch (policy) {
    case AutocastPolicy::kLowPrecision:
      target = region.dtype;
      break;
    case AutocastPolicy::kFloat32:
      target = DType::Float32;
      break;
    case AutocastPolicy::kPromote: {
      std::optional<DType> widest = promote_target(inputs);
      if (!widest) return std::nullopt;
      target = *widest;
      break;
    }
    default:
      return std::nullopt;
  }
  std::optional<std::vector<Tensor>> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DType to =
        policy == AutocastPolicy::kLowPrecision && i < 64 && (info.float32_inputs >> i & 1) != 0
            ? DType::Float32
            : target;
    if (!eligible(inputs[i]) || inputs[i].dtype() == to) continue;
    if (!out) out = inputs;
    (*out)[i] = cast(region, inputs[i], to, loc);
  }
  return out;
}
}  // namespace

std::optional<std::vector<Tensor>> autocast_inputs(AutocastRegion& region, const Op& op,
                                                   const std::vector<Tensor>& inputs,
                                                   const Loc& loc) {
  return cast_for_policy(region, policy_info(op), inputs, loc);
}

std::vector<Tensor> autocast_inputs_for(const char* op_name, const std::vector<Tensor>& inputs,
                                        const Loc& loc) {
  AutocastRegion* region = dispatch_tls.autocast;
  const OpDefinition* def = find_op_definition(op_name);
  if (region == nullptr || dispatch_tls.composite || def == nullptr) return inputs;
  std::optional<std::vector<Tensor>> cast =
      cast_for_policy(*region, policy_info(*def), inputs, loc);
  return cast ? *cast : inputs;
}

AutocastSuspend::AutocastSuspend() : saved_(dispatch_tls.autocast) {
  if (saved_) saved_->clear_caches();
  dispatch_tls.autocast = nullptr;
}

AutocastSuspend::~AutocastSuspend() {
  dispatch_tls.autocast = saved_;
}

}  // namespace detail

const char* autocast_policy_name(AutocastPolicy policy) {
  switch (policy) {
    case AutocastPolicy::kUndeclared:
      return "undeclared";
    case AutocastPolicy::kLowPrecision:
      return "low_precision";
    case AutocastPolicy::kFloat32:
      return "float32";
    case AutocastPolicy::kPromote:
      return "promote";
    case AutocastPolicy::kKeep:
      return "keep";
  }
  return "?";
}

AutocastPolicy autocast_policy(const Op& op) {
  return detail::policy_info(op).policy;
}

bool has_native_low_precision(DType dtype) {
  if (const char* env = std::getenv("KILN_NATIVE_LOW_PRECISION"); env && *env)
    return std::strcmp(env, "0") != 0;
  bool (*query)(DType) = detail::native_query.load();
  return query && query(dtype);
}

AutocastGuard::AutocastGuard(DType dtype, AutocastOptions options, const Loc& loc)
    : dtype_(dtype), saved_(detail::dispatch_tls.autocast), region_(nullptr) {
  if (dtype != DType::BFloat16 && dtype != DType::Float16)
    fail("autocast", loc, "expected bfloat16 or float16 as the low precision, but got {}",
         dtype_name(dtype));
  if (options.enabled) {
    if (options.force || has_native_low_precision(dtype)) {
      region_ = new detail::AutocastRegion{
          dtype, options.cache, static_cast<detail::AutocastRegion*>(saved_), {}};
    } else {
      warn_once(std::string("autocast-no-native-") + dtype_name(dtype),
                fmt::format("autocast({}): this CPU has no native {} matmul and convolution "
                            "kernels (oneDNN would convert to float32 and back, several times "
                            "slower than float32), so the region runs in float32; pass "
                            "AutocastOptions{{.force = true}} to use {} anyway",
                            dtype_name(dtype), dtype_name(dtype), dtype_name(dtype)));
    }
  }
  detail::dispatch_tls.autocast = static_cast<detail::AutocastRegion*>(region_);
}

AutocastGuard::~AutocastGuard() {
  detail::dispatch_tls.autocast = static_cast<detail::AutocastRegion*>(saved_);
  delete static_cast<detail::AutocastRegion*>(region_);
}

bool AutocastGuard::active() const {
  return region_ != nullptr;
}

std::optional<DType> autocast_dtype() {
  const detail::AutocastRegion* r = detail::dispatch_tls.autocast;
  if (!r) return std::nullopt;
  return r->dtype;
}

}  // namespace kiln
