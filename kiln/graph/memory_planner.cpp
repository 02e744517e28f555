#include "kiln/graph/memory_planner.h"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

#include "kiln/core/allocator.h"
#include "kiln/core/grad_mode.h"

namespace kiln::graph {

namespace {

size_t rounded(size_t nbytes) {
  return (nbytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// One block of the plan's size from the caching allocator (its stats count it).
struct Arena {
  explicit Arena(size_t bytes) : bytes(bytes) {
    if (bytes > 0) base = static_cast<char*>(CachingAllocator::instance().allocate(bytes));
  }
  ~Arena() {
    if (base) CachingAllocator::instance().deallocate(base);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  char* base = nullptr;
  size_t bytes = 0;
};

struct ShapeKey {
  std::vector<Shape> shapes;
  std::vector<Strides> strides;
  bool operator==(const ShapeKey&) const = default;
};

}  // namespace

// The plan of one concrete input shape; guarded by the planner's mutex.
class ShapePlan {
 public:
  ShapeKey key;
  std::shared_ptr<const MemoryPlan> plan;
  int recordings = 0;
  bool disabled = false;
  uint64_t last_used = 0;
  std::vector<std::unique_ptr<Arena>> idle;
};

struct MemoryPlanner::State {
  mutable std::mutex mutex;
  std::vector<std::shared_ptr<ShapePlan>> shapes;
  uint64_t clock = 0;
  MemoryPlannerStats stats;
};

// The allocation session of one run (Note [allocation sessions]): records when it has no plan,
// serves from the arena when it has one. Releases may come from any thread, so every member is
// guarded by the mutex.
class RunSession final : public AllocationSession {
 public:
  RunSession(std::shared_ptr<const MemoryPlan> plan, std::unique_ptr<Arena> arena)
      : plan_(std::move(plan)), arena_(std::move(arena)) {}

  void* allocate(size_t nbytes, int64_t& ticket) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!plan_) return record(nbytes, ticket);
    ticket = -1;
    if (!closed_ && !diverged_) {
      const size_t k = next_++;
      const MemoryPlan& p = *plan_;
      if (k >= p.nbytes.size() || p.nbytes[k] != nbytes || p.nodes[k] != node_) {
        diverged_ = true;
      } else if (p.offsets[k] >= 0) {
        if (void* data = serve(k)) {
          ticket = static_cast<int64_t>(k);
          return data;
        }
        ++fallbacks_;
      }
    }
    return CachingAllocator::instance().allocate(nbytes);
  }

  void release(void* data, int64_t ticket) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!plan_) {
      CachingAllocator::instance().deallocate(data);
      if (closed_) return;
      records_[static_cast<size_t>(ticket)].end = clock_++;
      live_records_.erase(data);
      return;
    }
    if (ticket < 0) {
      CachingAllocator::instance().deallocate(data);
      return;
    }
    const int64_t offset = plan_->offsets[static_cast<size_t>(ticket)];
    auto [lo, hi] = live_.equal_range(offset);
    for (auto it = lo; it != hi; ++it)
      if (it->second == static_cast<int>(ticket)) {
        live_.erase(it);
        break;
      }
  }

  void begin_node(int n, const void* overwritable) {
    std::lock_guard<std::mutex> lock(mutex_);
    node_ = n;
    overwritable_ = overwritable;
    granted_ = -1;
  }

  void end_node(const std::vector<Tensor>& outputs) {
    if (!overwritable_) return;
    const void* out = !outputs.empty() && outputs[0].defined() && !outputs[0].is_meta()
                          ? outputs[0].storage()->address()
                          : nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!plan_) {
      // The output's allocation and the input's, paired for the plan.
      auto o = live_records_.find(out);
      auto i = live_records_.find(overwritable_);
      if (o != live_records_.end() && i != live_records_.end() &&
          records_[static_cast<size_t>(o->second)].node == node_)
        records_[static_cast<size_t>(o->second)].overwrites = i->second;
    } else if (granted_ >= 0 && out != overwritable_) {
      // The bytes went to an allocation that was not the output: the run no longer follows the
      // recorded one, so nothing more is served from the arena.
      diverged_ = true;
    }
    overwritable_ = nullptr;
  }

  bool recording() const { return !plan_; }

  struct Outcome {
    std::vector<AllocationRecord> records;  // when recording
    bool diverged = false;
    bool arena_free = true;
    int64_t fallbacks = 0;
    int64_t served = 0;
  };
  Outcome finish() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    Outcome out;
    out.records = std::move(records_);
    out.diverged = diverged_;
    out.arena_free = live_.empty();
    out.fallbacks = fallbacks_;
    out.served = served_;
    return out;
  }
  // The arena, once finish() found it free.
  std::unique_ptr<Arena> take_arena() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::move(arena_);
  }

 private:
  void* record(size_t nbytes, int64_t& ticket) {
    void* data = CachingAllocator::instance().allocate(nbytes);
    if (closed_) {
      ticket = -1;
      return data;
    }
    ticket = static_cast<int64_t>(records_.size());
    records_.push_back({node_, nbytes, clock_++, -1, -1});
    live_records_[data] = static_cast<int>(ticket);
    return data;
  }

  // Allocation k's bytes, when no live allocation holds any of them but the in-place partner the
  // executor approved for this node; else null.
  void* serve(size_t k) {
    const MemoryPlan& p = *plan_;
    const int64_t offset = p.offsets[k];
    const auto end = offset + static_cast<int64_t>(rounded(p.nbytes[k]));
    char* data = arena_->base + offset;
    bool in_place = false;
    // Live allocations do not overlap (but for in-place pairs, which coincide), so walking down
    // from the last one starting below `end` meets every overlapping one first.
    for (auto it = live_.lower_bound(end); it != live_.begin();) {
      --it;
      const int idx = it->second;
      if (it->first + static_cast<int64_t>(rounded(p.nbytes[static_cast<size_t>(idx)])) <= offset)
        break;
      if (idx == p.overwrites[k] && overwritable_ == data && !in_place) {
        in_place = true;
        continue;
      }
      return nullptr;
    }
    if (in_place) granted_ = static_cast<int>(k);
    live_.emplace(offset, static_cast<int>(k));
    ++served_;
    return data;
  }

  std::mutex mutex_;
  std::shared_ptr<const MemoryPlan> plan_;  // null: recording
  std::unique_ptr<Arena> arena_;
  bool closed_ = false;
  int node_ = -1;
  const void* overwritable_ = nullptr;
  // Recording.
  std::vector<AllocationRecord> records_;
  std::unordered_map<const void*, int> live_records_;
  int64_t clock_ = 0;
  // Replaying.
  size_t next_ = 0;
  bool diverged_ = false;
  int granted_ = -1;
  std::multimap<int64_t, int> live_;  // offset -> allocation
  int64_t fallbacks_ = 0;
  int64_t served_ = 0;
};

MemoryPlanner::MemoryPlanner() : state_(std::make_shared<State>()) {}
MemoryPlanner::~MemoryPlanner() = default;

std::unique_ptr<PlannedRun> MemoryPlanner::begin(const std::vector<Tensor>& inputs) {
  ShapeKey key;
  for (const Tensor& t : inputs) {
    key.shapes.push_back(t.defined() ? t.shape() : Shape{});
    key.strides.push_back(t.defined() ? t.strides() : Strides{});
  }
  std::lock_guard<std::mutex> lock(state_->mutex);
  State& st = *state_;
  std::shared_ptr<ShapePlan> shape;
  for (const auto& s : st.shapes)
    if (s->key == key) shape = s;
  if (!shape) {
    if (st.shapes.size() >= static_cast<size_t>(kMaxShapes)) {
      auto lru = std::min_element(
          st.shapes.begin(), st.shapes.end(),
          [](const auto& a, const auto& b) { return a->last_used < b->last_used; });
      st.shapes.erase(lru);
    }
    shape = std::make_shared<ShapePlan>();
    shape->key = std::move(key);
    st.shapes.push_back(shape);
    ++st.stats.shapes;
  }
  shape->last_used = ++st.clock;
  if (shape->disabled) return nullptr;
  std::unique_ptr<Arena> arena;
  if (shape->plan) {
    if (!shape->idle.empty()) {
      arena = std::move(shape->idle.back());
      shape->idle.pop_back();
    } else {
      // The blocks the recorded run freed are what the arena replaces: give the cached ones back
      // first, so that the arena takes their place instead of adding to them.
      empty_cache();
      arena = std::make_unique<Arena>(shape->plan->arena_bytes);
      ++st.stats.arenas;
    }
  }
  auto session = std::make_shared<RunSession>(shape->plan, std::move(arena));
  return std::make_unique<PlannedRun>(state_, std::move(shape), std::move(session));
}

MemoryPlannerStats MemoryPlanner::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

void MemoryPlanner::release_idle_arenas() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  for (const auto& s : state_->shapes) s->idle.clear();
}

PlannedRun::PlannedRun(std::shared_ptr<MemoryPlanner::State> planner,
                       std::shared_ptr<ShapePlan> shape, std::shared_ptr<RunSession> session)
    : planner_(std::move(planner)),
      shape_(std::move(shape)),
      session_(session),
      scope_(std::move(session)) {}

PlannedRun::~PlannedRun() {
  RunSession::Outcome out = session_->finish();
  std::optional<MemoryPlan> plan;
  if (session_->recording()) plan = plan_memory(out.records);
  std::lock_guard<std::mutex> lock(planner_->mutex);
  MemoryPlannerStats& st = planner_->stats;
  ShapePlan& shape = *shape_;
  if (plan) {
    ++st.recordings;
    ++shape.recordings;
    st.last_plan = *plan;
    shape.plan = std::make_shared<const MemoryPlan>(std::move(*plan));
    shape.idle.clear();
    return;
  }
  ++st.replays;
  st.fallbacks += out.fallbacks;
  st.arena_allocations += out.served;
  if (out.diverged) ++st.diverged;
  if (!out.arena_free) ++st.kept_arenas;
  if (out.arena_free) {
    std::unique_ptr<Arena> arena = session_->take_arena();
    // A plan recorded again meanwhile has another size: this arena is not its.
    if (arena && shape.plan && arena->bytes == shape.plan->arena_bytes)
      shape.idle.push_back(std::move(arena));
  }
  if (out.diverged || !out.arena_free) {
    shape.plan.reset();
    shape.idle.clear();
    if (shape.recordings >= MemoryPlanner::kMaxRecordings) {
      shape.disabled = true;
      ++st.disabled;
    }
  }
}

void PlannedRun::begin_node(int n, const void* overwritable) {
  session_->begin_node(n, overwritable);
}

void PlannedRun::end_node(const std::vector<Tensor>& outputs) {
  session_->end_node(outputs);
}

const void* overwritable_input(const Op& op, const std::vector<Tensor>& args,
                               const std::vector<bool>& dying, const Loc& loc) {
  const uint64_t mask = op.may_overwrite();
  if (mask == 0) return nullptr;
  // A tape recording this call would save inputs the output overwrites.
  if (GradMode::is_enabled())
    for (const Tensor& a : args)
      if (a.defined() && a.requires_grad()) return nullptr;
  std::optional<std::vector<TensorMeta>> metas;  // infer runs once, for the first candidate
  for (size_t j = 0; j < args.size() && j < 64; ++j) {
    const Tensor& a = args[j];
    if (!(mask >> j & 1) || !dying[j] || !a.defined() || a.is_meta()) continue;
    // Only the executor's handle (its environment and the call's arguments) and no view.
    if (a.impl_ptr().use_count() != 2 || a.storage().use_count() != 1) continue;
    if (a.storage_offset() != 0 || a.nbytes() != a.storage()->nbytes() || a.nbytes() == 0) continue;
    const bool contiguous = a.is_contiguous();
    if (!contiguous && !a.is_channels_last()) continue;
    if (!metas) metas = op.infer(args, loc);
    if (metas->empty()) return nullptr;
    const TensorMeta& m = (*metas)[0];
    if (m.shape != a.shape() || m.dtype != a.dtype() || !m.strides.empty() || m.alias_of >= 0)
      continue;
    const bool fits =
        m.memory_format == MemoryFormat::kContiguous ? contiguous : a.is_channels_last();
    if (fits) return a.storage()->address();
  }
  return nullptr;
}

}  // namespace kiln::graph
