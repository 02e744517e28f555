// BlockedCache, keyed by a tensor's storage, offset, strides and version, and the two caches
// built from it.
#include "kiln/backend/onednn/conv_weight_cache.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/core/storage.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {
namespace detail {

namespace {

std::vector<float> values(const Tensor* fold) {
  if (fold == nullptr) return {};
  const auto* f = static_cast<const float*>(fold->raw_data());
  return {f, f + fold->numel()};
}

// Note [conv weight cache]: reordering the weights into the primitive's blocked layout reads and
// writes every weight on every call; for ResNet-18 at batch 1 that is most of the forward. For
// forwards whose purpose is inference (no gradient recorded: Note [conv algorithm]), the blocked
// copy of a float32 weight is cached, keyed by the weight's storage (held weakly, so a freed
// storage never matches a new one at the same address), its offset, its version counter and the
// layout. Every in-place write through kiln (optimizer steps, copy_, load_state_dict) bumps the
// version, so a changed weight misses; code writing a weight through raw_data() must bump the
// version itself. Training passes never use it: their weights change every step, and the copies
// would only add memory.
//
// A folded weight (Note [conv epilogue]) is cached the same way; the per-channel scale it was
// multiplied by is part of the key, compared by value, since callers compute it afresh per call.
//
// The same kind of cache, two entries deep, serves a convolution's backward: the data and weight
// gradients both read grad_output in the same blocked layout, so the second pass takes the
// first's copy instead of reordering it again.
class BlockedCache {
 public:
  explicit BlockedCache(size_t max_entries) : max_entries_(max_entries) {}

  // The copy of plain tensor t (times `fold` per output channel when given, a float32 [O]) in
  // operand op's chosen layout, computed by fold_and_block on a miss.
  Tensor get(const Tensor& t, const Operand& op, const Tensor* fold = nullptr) {
    std::vector<float> scale = values(fold);
    Tensor blocked = find(t, op.chosen, scale);
    if (blocked.defined()) return blocked;
    blocked = fold_and_block(t, fold, op);
    put(t, op.chosen, blocked, std::move(scale));
    return blocked;
  }

 private:
  // The cached copy of plain tensor t in layout `chosen` (of t times `fold` per output channel,
  // when fold is not empty), or an undefined Tensor.
  Tensor find(const Tensor& t, const dnnl::memory::desc& chosen, const std::vector<float>& fold) {
    const std::string k = key(t, chosen);
    std::lock_guard<std::mutex> lock(mutex_);
    for (Entry& e : entries_)
      if (e.key == k && e.chosen == chosen && e.version == t.version() && e.fold == fold &&
          e.storage.lock() == t.storage()) {
        e.last_use = ++clock_;
        return e.blocked;
      }
    return {};
  }

  // Records `blocked` as t's copy in layout `chosen`.
  void put(const Tensor& t, const dnnl::memory::desc& chosen, Tensor blocked,
           std::vector<float> fold) {
    std::lock_guard<std::mutex> lock(mutex_);
    evict();
    entries_.push_back({key(t, chosen), chosen, t.storage(), t.version(), std::move(fold),
                        std::move(blocked), ++clock_});
  }

  struct Entry {
    std::string key;
    dnnl::memory::desc chosen;
    std::weak_ptr<Storage> storage;
    uint64_t version = 0;
    std::vector<float> fold;
    Tensor blocked;
    uint64_t last_use = 0;
  };
  static std::string key(const Tensor& t, const dnnl::memory::desc& chosen) {
    // The strides tell apart two views of one storage that have the same shape (a permutation of
    // equal dims). Raw bytes, not text: this runs on every convolution call.
    const void* storage = t.storage().get();
    const int64_t fields[2] = {t.storage_offset(), static_cast<int64_t>(chosen.get_size())};
    std::string k(reinterpret_cast<const char*>(&storage), sizeof(storage));
    k.append(reinterpret_cast<const char*>(fields), sizeof(fields));
    k.append(reinterpret_cast<const char*>(t.strides().data()),
             t.strides().size() * sizeof(int64_t));
    return k;
  }
  // Drops the entries whose tensors are gone or changed, or else the least recently used one.
  void evict() {
    std::erase_if(entries_, [](const Entry& e) {
      auto st = e.storage.lock();
      return !st || st->version() != e.version;
    });
    if (entries_.size() < max_entries_) return;
    entries_.erase(
        std::min_element(entries_.begin(), entries_.end(),
                         [](const Entry& x, const Entry& y) { return x.last_use < y.last_use; }));
  }
  size_t max_entries_;
  uint64_t clock_ = 0;
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

BlockedCache& weight_cache() {
  static auto* cache = new BlockedCache(1024);
  return *cache;
}

BlockedCache& grad_output_cache() {
  static auto* cache = new BlockedCache(2);
  return *cache;
}

}  // namespace

Tensor fold_and_block(const Tensor& w, const Tensor* fold, const Operand& op) {
  Tensor src = w;
  if (fold != nullptr) {
    // A 16-bit weight is scaled in float32 and rounded once (Note [low-precision conv epilogue]).
    NoGradGuard no_grad;
    const Tensor w32 = w.dtype() == DType::Float32 ? w : to_dtype(w, DType::Float32);
    src = mul(w32, reshape(*fold, {w.dim_size(0), 1, 1, 1}));
    if (w.dtype() != DType::Float32) src = to_dtype(src, w.dtype());
  }
  if (!op.needs_reorder()) return src;
  Tensor blocked = scratch(op.chosen);
  dnnl::engine& eng = dnnl_engine();
  dnnl::memory plain(op.plain, eng, src.raw_data()), out(op.chosen, eng, blocked.raw_data());
  op.reorder.execute(dnnl_stream(), plain, out);
  dnnl_stream().wait();
  return blocked;
}

Tensor blocked_weight(const Tensor& w, const Operand& op, const Tensor* fold) {
  return weight_cache().get(w, op, fold);
}

Tensor blocked_grad_output(const Tensor& g, const Operand& op) {
  return grad_output_cache().get(g, op);
}

}  // namespace detail
}  // namespace kiln
