#include "kiln/nn/conv_bn.h"

#include <array>
#include <memory>

#include <mutex>
#include <unordered_map>
#include "kiln/graph/tracer.h"

#include "kiln/core/grad_mode.h"
#include "kiln/core/storage.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/conv_bn_fold.h"
#include "kiln/ops/dispatch_mode.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/unary.h"

namespace kiln::nn {

namespace {

// Which tensor a folded value was computed from, and at which version (undefined tensors match
// undefined ones). The storage is held weakly, so a freed one never matches a new one.
struct Stamp {
  bool defined = false;
  std::weak_ptr<Storage> storage;
  int64_t offset = 0;
  uint64_t version = 0;

  explicit Stamp(const Tensor& t) : defined(t.defined()) {
    if (!defined) return;
    storage = t.storage();
    offset = t.storage_offset();
    version = t.version();
  }
  bool matches(const Tensor& t) const {
    if (!t.defined() || !defined) return t.defined() == defined;
    return offset == t.storage_offset() && version == t.version() && storage.lock() == t.storage();
  }
};

// batch_norm's evaluation formula on [C] vectors, with the conv bias folded in (Note [conv-bn
// fold] in ops/conv_bn_fold.h), in dtype dt: the input's, or float32 for a 16-bit input (Note
// [low-precision conv epilogue]), the parameters converted to it where they differ.
std::pair<Tensor, Tensor> fold(const Conv2d& conv, const BatchNorm& bn, DType dt) {
  const auto as = [dt](const Tensor& t) {
    return t.defined() && t.dtype() != dt && is_low_precision(t.dtype()) ? to_dtype(t, dt) : t;
  };
  return conv_bn_fold(to_dtype(bn.running_mean, dt), to_dtype(bn.running_var, dt), as(bn.weight),
                      as(bn.bias), as(conv.bias), bn.options.eps);
}

DType fold_dtype(const Tensor& input) {
  return is_low_precision(input.dtype()) ? DType::Float32 : input.dtype();
}

// Note [conv-bn fold cache]: the folded scale and shift depend only on the batch norm's
// parameters and running statistics and the conv's bias, which do not change between inference
// calls; computing them was 6-8 small ops per layer, ~4% of a ResNet-18 batch-1 forward, and is
// still one op per layer (plus the statistics' dtype conversions, where they differ) that the
// cache saves. So they are kept per batch-norm module, with a stamp (storage,
// offset, version) of each tensor they came from: an in-place update (load_state_dict, an
// optimizer step) or a replaced tensor recomputes them. A cached value must never change what
// the op stream shows, so the cache is used only when
//   - no dispatch mode is pushed on this thread (dispatch_mode_stack() is empty): a tracer, a
//     recorder or any other mode must see the conv_bn_fold op on every call, or it would freeze
//     the folded values as constants, which an optimizer step or load_state_dict then changes;
//   - no gradient is recorded for the fold (grad mode off, or no input requiring grad): a
//     recorded fold must be a node of this call's graph, so that the batch norm's parameters get
//     their gradients; a cached one would belong to an earlier, already freed graph.
// Eager calls that fit both (inference, evaluation) hit it; the rest dispatch the op.
class FoldCache {
 public:
  std::pair<Tensor, Tensor> get(const Conv2d& conv, const BatchNorm& bn, DType dt) {
    const std::array<const Tensor*, 5> from{&bn.weight, &bn.bias, &bn.running_mean, &bn.running_var,
                                            &conv.bias};
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(&bn);
    if (it != entries_.end()) {
      const Entry& e = it->second;
      bool hit = e.conv == &conv && e.dtype == dt && e.eps == bn.options.eps;
      for (size_t i = 0; hit && i < from.size(); ++i) hit = e.stamps[i].matches(*from[i]);
      if (hit) return {e.scale, e.shift};
    }
    if (entries_.size() >= 4096) drop_expired();
    auto [scale, shift] = fold(conv, bn, dt);
    entries_.insert_or_assign(&bn, Entry{&conv,
                                         dt,
                                         bn.options.eps,
                                         {Stamp(bn.weight), Stamp(bn.bias), Stamp(bn.running_mean),
                                          Stamp(bn.running_var), Stamp(conv.bias)},
                                         scale,
                                         shift});
    return {scale, shift};
  }

 private:
  struct Entry {
    const Conv2d* conv;
    DType dtype;
    double eps;
    std::array<Stamp, 5> stamps;
    Tensor scale, shift;
  };
  // Entries of modules that are gone: their running statistics' storage has been freed.
  void drop_expired() {
    std::erase_if(entries_, [](const auto& kv) { return kv.second.stamps[3].storage.expired(); });
  }
  std::mutex mutex_;
  std::unordered_map<const BatchNorm*, Entry> entries_;
};

FoldCache& fold_cache() {
  static auto* cache = new FoldCache();
  return *cache;
}

// Whether the fold may come from the cache (Note [conv-bn fold cache]).
bool may_cache(const Conv2d& conv, const BatchNorm& bn) {
  if (!dispatch_mode_stack().empty()) return false;
  if (!GradMode::is_enabled()) return true;
  for (const Tensor* t : {&bn.weight, &bn.bias, &bn.running_mean, &bn.running_var, &conv.bias})
    if (t->defined() && t->requires_grad()) return false;
  return true;
}

}  // namespace

Tensor conv_bn(Conv2d& conv, BatchNorm& bn, const Tensor& input, const Tensor& residual,
               bool relu_after) {
  // Note [quantized layers]: int8 with the batch norm folded in, or calibrating.
  if (LayerQuantization* q = conv.quantization.get()) {
    if (q->active && q->folded_batch_norm) {
      Tensor y = quantized_forward(conv, *q, input, relu_after && !residual.defined());
      if (!residual.defined()) return y;
      y = add(y, residual);
      return relu_after ? relu(y) : y;
    }
    if (q->observer) {
      q->observer->observe(input);
      q->calibrated_with = &bn;
      // The convolution's own forward must not observe the same input again.
      struct Restore {
        LayerQuantization* q;
        std::shared_ptr<ActivationObserver> observer;
        ~Restore() { q->observer = std::move(observer); }
      } restore{q, std::move(q->observer)};
      return conv_bn(conv, bn, input, residual, relu_after);
    }
  }
  // Explicit state only, never grad mode (Note [conv-bn inference]).
  const bool fuse = !conv.is_training() && !bn.is_training() && bn.options.track_running_stats &&
                    bn.running_mean.defined() && bn.running_var.defined() &&
                    !conv.has_forward_hooks() && !bn.has_forward_hooks() && input.dim() == 4 &&
                    (!input.is_meta() || graph::Tracer::active());
  if (!fuse) {
    Tensor y = bn(conv(input));
    if (residual.defined()) y = add(y, residual);
    return relu_after ? relu(y) : y;
  }
  const DType dt = fold_dtype(input);
  auto [scale, shift] = may_cache(conv, bn) ? fold_cache().get(conv, bn, dt) : fold(conv, bn, dt);
  return conv2d_affine(input, conv.weight, scale, shift, residual, relu_after, conv.options);
}

}  // namespace kiln::nn
