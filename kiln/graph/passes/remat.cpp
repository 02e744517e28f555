// Rematerialization (Note [rematerialization]).
#include <algorithm>
#include <functional>

#include "kiln/graph/control_flow_ops.h"
#include "kiln/graph/passes/pass.h"
#include "kiln/graph/passes/rewrite.h"

namespace kiln::graph::passes {

// Note [rematerialization]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A training graph keeps the forward pass's activations alive until the backward pass reads them,
// so its memory peaks where the backward pass begins, with every saved activation alive. Many of
// them are cheap to compute again from values that stay alive anyway: a residual block's
// relu(batch_norm(conv(x)) + identity) is read by the next convolution's weight gradient and by
// the relu's gradient, while the convolution's output (batch_norm's gradient reads it), the
// identity and the statistics are kept regardless. This pass computes such values again just
// before their first read after the peak, so that the forward copy dies after its last forward
// reader, as PyTorch's activation checkpointing and the min-cut partitioner of torch.compile do
// by hand or by policy.
//
// A value v qualifies when it owns memory (not a view, an input or a capture), is not a graph
// output, is alive across the peak (made before it, read after it, directly or through a view)
// and is not read at the peak itself; its recomputation is the closure of the nodes that made it,
// back to values alive at its first late read q (inputs, captures, or values read at q or later).
// Each node in it is pure and memory-bound (Op::memory_bound: elementwise ops, fused elementwise
// chains, normalizations), at most kMaxClosure of them, with no output whose memory any node
// writes; no node between the closure and q writes a leaf's memory. The copies run the same ops on
// the same values, so results are bit for bit the graph's (a batch_norm copy recomputes its
// statistics exactly as the original did). The reads of v from q on read the copy; a view of v
// made before the peak keeps v alive still, so such a rewrite lowers nothing and is dropped.
//
// A value worth it holds at least 1/kMinShare of the peak, and its copies make at most kMaxCost
// times its bytes (a batch_norm copied for its [C] statistics would not be). A rewrite is kept
// only when it lowers the peak of the liveness profile: the bytes of owned values alive at each
// node, with an elementwise node's output counted in the input it may overwrite (Note [in-place
// computation], as the memory planner places it) and a symbolic dim counted as kSymbolicSize. So a
// graph without a backward pass, or one whose peak no recomputation lowers, is left as it was.
// Rewrites are greedy, largest value first (then the one read soonest after the peak: a later
// value's copies may read it), until none lowers the peak. After each one the copies are
// rescheduled (schedule_copies): each runs just before its first reader, so that the copies of
// successive rewrites (a block's output recomputed from the previous block's output, itself
// recomputed) interleave instead of waiting side by side. The pass runs once, after the
// fixed-point pipeline: cse would merge the copies back into the originals.
//
// Measured (build/release/bench/kiln_memory_plan_bench --only "Adam step", CIFAR ResNet-18, batch
// 128, Adam, an AVX2 CPU): the planned arena of the compiled step is 667.6 MiB without this pass
// and `hoist` (Note [hoisting writes]), 439.6 MiB with this pass alone and 400.6 MiB with both;
// eager's allocator peak is 593.3 MiB. What is left at the peak, where the backward pass begins,
// is mostly the 20 convolutions' outputs, which batch_norm's gradient reads.
namespace {

constexpr size_t kMaxClosure = 6;  // nodes recomputed for one value
constexpr int kMaxRewrites = 512;
constexpr int64_t kMinShare = 256;  // a candidate holds at least 1/kMinShare of the peak
constexpr int64_t kMaxCost = 4;     // bytes the copies make, per byte saved

// A symbolic dim (the batch) counts as this size, whatever size it was traced with (the tracer
// probes small ones): a training batch, where activations outweigh the batch-independent
// parameter gradients, as they do when the graph runs.
constexpr int64_t kSymbolicSize = 128;

int64_t value_bytes(const Value& v) {
  int64_t n = 1;
  for (const Dim& d : v.shape) n *= d.is_symbolic() ? kSymbolicSize : d.size;
  return n * static_cast<int64_t>(itemsize(v.dtype));
}

class Liveness {
 public:
  explicit Liveness(const Graph& g) : g_(g), facts_(g) {
    const size_t nv = g.values.size();
    const int n = static_cast<int>(g.nodes.size());
    last_.assign(nv, -1);
    writes_.resize(nv);
    for (int i = 0; i < n; ++i) {
      const Node& node = g.nodes[static_cast<size_t>(i)];
      for (int id : node.inputs) last_[static_cast<size_t>(id)] = i;
      const uint64_t mask = node.op->mutates();
      for (size_t k = 0; k < node.inputs.size() && k < 64; ++k)
        if (mask & (uint64_t{1} << k)) writes_[root(node.inputs[k])].push_back(i);
    }
    for (int id : g.outputs) last_[static_cast<size_t>(id)] = n;
    // A view keeps its root's memory alive.
    for (size_t v = 0; v < nv; ++v) {
      const size_t r = root(static_cast<int>(v));
      if (r != v) last_[r] = std::max(last_[r], last_[v]);
    }
    // Who owns each value's memory: itself, or (Note [in-place computation]) the input that an
    // elementwise node computed it into, as the memory planner places it.
    owner_.resize(nv);
    for (size_t v = 0; v < nv; ++v) owner_[v] = static_cast<int>(v);
    for (int i = 0; i < n; ++i) {
      const Node& node = g.nodes[static_cast<size_t>(i)];
      const uint64_t mask = node.op->may_overwrite();
      if (mask == 0 || facts_.effectful[static_cast<size_t>(i)] || node.outputs.empty() ||
          node.outputs[0] == kNoValue)
        continue;
      const Value& out = g.values[static_cast<size_t>(node.outputs[0])];
      for (size_t k = 0; k < node.inputs.size() && k < 64; ++k) {
        const int in = node.inputs[k];
        const Value& v = g.values[static_cast<size_t>(in)];
        if ((mask & (uint64_t{1} << k)) && owns(in) && last_[static_cast<size_t>(in)] == i &&
            !facts_.is_output[static_cast<size_t>(in)] && v.dtype == out.dtype &&
            value_bytes(v) == value_bytes(out)) {
          owner_[static_cast<size_t>(out.id)] = owner_[static_cast<size_t>(in)];
          break;
        }
      }
    }
    std::vector<int> end(nv, -1);
    for (size_t v = 0; v < nv; ++v) {
      if (!owns(static_cast<int>(v))) continue;
      const size_t o = static_cast<size_t>(owner_[v]);
      end[o] = std::max({end[o], last_[v], facts_.producer[v]});
    }
    std::vector<int64_t> delta(static_cast<size_t>(n) + 2, 0);
    for (size_t v = 0; v < nv; ++v) {
      if (!owns(static_cast<int>(v)) || owner_[v] != static_cast<int>(v)) continue;
      const int64_t bytes = value_bytes(g.values[v]);
      delta[static_cast<size_t>(facts_.producer[v])] += bytes;
      delta[static_cast<size_t>(std::min(end[v], n - 1)) + 1] -= bytes;
    }
    int64_t live = 0;
    for (int i = 0; i < n; ++i) {
      live += delta[static_cast<size_t>(i)];
      if (live > peak_) {
        peak_ = live;
        peak_at_ = i;
      }
    }
  }

  int64_t peak() const { return peak_; }
  // How to recompute one value: the nodes to copy (in graph order) and where (before node q).
  struct Plan {
    int value = 0;
    int q = 0;
    int64_t bytes = 0;
    std::vector<int> closure;
  };

  // The values alive across the peak that qualify (Note [rematerialization]), largest first,
  // then the one read soonest after the peak (a later value's recomputation may read it). A
  // value of less than 1/kMinShare of the peak is not worth a recomputation.
  std::vector<Plan> plans() const {
    std::vector<Plan> out;
    if (peak_at_ < 0) return out;
    for (size_t v = 0; v < g_.values.size(); ++v) {
      const int64_t bytes = value_bytes(g_.values[v]);
      if (!owns(static_cast<int>(v)) || facts_.is_output[v] || facts_.producer[v] >= peak_at_ ||
          last_[v] <= peak_at_ || read_at(v, peak_at_) || bytes * kMinShare < peak_)
        continue;
      Plan plan{static_cast<int>(v), -1, bytes, {}};
      for (int i = peak_at_ + 1; i < static_cast<int>(g_.nodes.size()) && plan.q < 0; ++i)
        if (reads(g_.nodes[static_cast<size_t>(i)], plan.value)) plan.q = i;
      if (plan.q < 0 || !collect(plan.value, plan.q, plan.closure)) continue;
      // The copies make at most kMaxCost times the bytes they save.
      int64_t made = 0;
      for (int n : plan.closure)
        for (int id : g_.nodes[static_cast<size_t>(n)].outputs)
          made += value_bytes(g_.values[static_cast<size_t>(id)]);
      if (made > kMaxCost * bytes) continue;
      std::sort(plan.closure.begin(), plan.closure.end());
      out.push_back(std::move(plan));
    }
    std::stable_sort(out.begin(), out.end(), [](const Plan& a, const Plan& b) {
      return a.bytes != b.bytes ? a.bytes > b.bytes : a.q < b.q;
    });
    return out;
  }

  // Applies a plan of this graph to g, a copy of it.
  void apply(Graph& g, const Plan& plan) const {
    std::vector<int> copy_of(g.values.size(), kNoValue);
    std::vector<Node> copies;
    for (int n : plan.closure) {
      Node c = g_.nodes[static_cast<size_t>(n)];
      for (int& id : c.inputs)
        if (copy_of[static_cast<size_t>(id)] != kNoValue) id = copy_of[static_cast<size_t>(id)];
      for (int& id : c.outputs) {
        const Value& old = g_.values[static_cast<size_t>(id)];
        const int fresh = g.add_value(old.dtype, old.shape);
        copy_of.push_back(kNoValue);
        copy_of[static_cast<size_t>(id)] = fresh;
        id = fresh;
      }
      copies.push_back(std::move(c));
    }
    const int replacement = copy_of[static_cast<size_t>(plan.value)];
    for (size_t i = static_cast<size_t>(plan.q); i < g.nodes.size(); ++i)
      for (int& id : g.nodes[i].inputs)
        if (id == plan.value) id = replacement;
    g.nodes.insert(g.nodes.begin() + plan.q, std::make_move_iterator(copies.begin()),
                   std::make_move_iterator(copies.end()));
  }

 private:
  size_t root(int v) const { return static_cast<size_t>(facts_.root[static_cast<size_t>(v)]); }

  // Whether v is memory a node of the graph made: not an input, a capture, a view, or the alias
  // an effect returns.
  bool owns(int v) const {
    const int p = facts_.producer[static_cast<size_t>(v)];
    return p >= 0 && root(v) == static_cast<size_t>(v) && !facts_.effectful[static_cast<size_t>(p)];
  }

  static bool reads(const Node& node, int v) {
    return std::find(node.inputs.begin(), node.inputs.end(), v) != node.inputs.end();
  }
  bool read_at(size_t v, int i) const {
    return reads(g_.nodes[static_cast<size_t>(i)], static_cast<int>(v));
  }

  bool alive_at(int v, int q) const {
    const size_t r = root(v);
    return facts_.is_input[r] || facts_.capture_of[r] >= 0 || last_[r] >= q;
  }

  bool written_between(int v, int from, int to) const {
    for (int w : writes_[root(v)])
      if (w > from && w < to) return true;
    return false;
  }

  bool recomputable(int n) const {
    const Node& node = g_.nodes[static_cast<size_t>(n)];
    if (facts_.effectful[static_cast<size_t>(n)] || !node.op->memory_bound() ||
        node.op->is_view() || !detail::subgraphs_of(*node.op).empty())
      return false;
    for (int id : node.outputs)
      if (id == kNoValue || facts_.memory_written(id)) return false;
    return true;
  }

  // Adds the producer of `value` and, recursively, of its inputs not alive at q to `closure`.
  bool collect(int value, int q, std::vector<int>& closure) const {
    const int n = facts_.producer[static_cast<size_t>(value)];
    if (n < 0 || !recomputable(n)) return false;
    if (std::find(closure.begin(), closure.end(), n) != closure.end()) return true;
    if (closure.size() >= kMaxClosure) return false;
    closure.push_back(n);
    for (int id : g_.nodes[static_cast<size_t>(n)].inputs) {
      if (alive_at(id, q)) {
        if (written_between(id, n, q)) return false;
        continue;
      }
      if (!collect(id, q, closure)) return false;
    }
    return true;
  }

  const Graph& g_;
  GraphFacts facts_;
  std::vector<int> last_;                 // per value: the last node reading it (n: an output)
  std::vector<std::vector<int>> writes_;  // per root value: the nodes writing its memory
  std::vector<int> owner_;                // per value: the value whose memory it is computed in
  int64_t peak_ = 0;
  int peak_at_ = -1;
};

// Reschedules the copies (the nodes all of whose outputs are values from `first_copy` on): each
// runs just before the first node that reads it, the copies it reads before it, the larger of two
// such chains first (a block's output is recomputed from the previous block's, recomputed too: that
// chain runs before the batch_norm copy it is added to, so the two are not alive at once). Copies
// nothing reads any more (a later rewrite's copies took their readers) are dropped. A copy reads
// only values alive at its rewrite's q and unwritten until then (Note [rematerialization]), and
// its first reader comes no later than that q, so running it there changes nothing it reads.
void schedule_copies(Graph& g, int first_copy) {
  const size_t n = g.nodes.size();
  std::vector<int> copy_of_value(g.values.size(), -1);  // the copy node making a value
  std::vector<char> is_copy(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    bool copy = !node.outputs.empty();
    for (int id : node.outputs) copy = copy && id >= first_copy;
    if (!copy) continue;
    is_copy[i] = 1;
    for (int id : node.outputs) copy_of_value[static_cast<size_t>(id)] = static_cast<int>(i);
  }
  // The copies a node reads, and how many copies each one's chain holds (a tree count).
  auto deps = [&](size_t i) {
    std::vector<size_t> d;
    for (int id : g.nodes[i].inputs) {
      const int c = copy_of_value[static_cast<size_t>(id)];
      if (c >= 0 && std::find(d.begin(), d.end(), static_cast<size_t>(c)) == d.end())
        d.push_back(static_cast<size_t>(c));
    }
    return d;
  };
  std::vector<int> chain(n, 0);
  for (size_t i = 0; i < n; ++i)
    if (is_copy[i]) {
      chain[i] = 1;
      for (size_t d : deps(i)) chain[i] += chain[d];
    }
  std::vector<char> emitted(n, 0);
  std::vector<Node> order;
  order.reserve(n);
  std::function<void(size_t)> emit_deps = [&](size_t i) {
    std::vector<size_t> d = deps(i);
    std::stable_sort(d.begin(), d.end(), [&](size_t a, size_t b) { return chain[a] > chain[b]; });
    for (size_t c : d) {
      if (emitted[c]) continue;
      emitted[c] = 1;
      emit_deps(c);
      order.push_back(std::move(g.nodes[c]));
    }
  };
  for (size_t i = 0; i < n; ++i) {
    if (is_copy[i]) continue;
    emit_deps(i);
    order.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(order);
}

}  // namespace

bool rematerialize(Graph& g) {
  bool changed = false;
  const int first_copy = static_cast<int>(g.values.size());
  for (int round = 0; round < kMaxRewrites; ++round) {
    const Liveness live(g);
    bool accepted = false;
    for (const Liveness::Plan& plan : live.plans()) {
      Graph trial = g;
      live.apply(trial, plan);
      schedule_copies(trial, first_copy);
      if (Liveness(trial).peak() < live.peak()) {
        g = std::move(trial);
        accepted = changed = true;
        break;
      }
    }
    if (!accepted) break;
  }
  // An original that only late readers read is dead now.
  if (changed) eliminate_dead_code(g);
  return changed;
}

}  // namespace kiln::graph::passes
