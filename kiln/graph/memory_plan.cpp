#include "kiln/graph/memory_plan.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace kiln::graph {

namespace {

size_t rounded(size_t nbytes) {
  return (nbytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// Allocations sharing bytes through in-place pairs, placed as one.
struct Group {
  size_t size = 0;
  int64_t start = std::numeric_limits<int64_t>::max();
  int64_t end = 0;
  int64_t offset = -1;
};

int find_root(std::vector<int>& root, int i) {
  while (root[static_cast<size_t>(i)] != i) {
    root[static_cast<size_t>(i)] = root[static_cast<size_t>(root[static_cast<size_t>(i)])];
    i = root[static_cast<size_t>(i)];
  }
  return i;
}

bool overlap_in_time(const Group& a, const Group& b) {
  return a.start < b.end && b.start < a.end;
}

// Best fit among the gaps left by the groups alive at the same time as g, else on top of them.
int64_t place(const Group& g, const std::vector<Group>& groups, const std::vector<int>& placed) {
  std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, offset + size)
  for (int j : placed) {
    const Group& o = groups[static_cast<size_t>(j)];
    if (overlap_in_time(g, o)) busy.emplace_back(o.offset, o.offset + static_cast<int64_t>(o.size));
  }
  std::sort(busy.begin(), busy.end());
  const auto size = static_cast<int64_t>(g.size);
  int64_t best = -1;
  int64_t best_gap = std::numeric_limits<int64_t>::max();
  int64_t top = 0;
  for (const auto& [begin, end] : busy) {
    const int64_t gap = begin - top;
    if (gap >= size && gap < best_gap) {
      best = top;
      best_gap = gap;
    }
    top = std::max(top, end);
  }
  return best >= 0 ? best : top;
}

}  // namespace

MemoryPlan plan_memory(const std::vector<AllocationRecord>& records) {
  const size_t n = records.size();
  MemoryPlan p;
  p.nodes.resize(n);
  p.nbytes.resize(n);
  p.offsets.assign(n, -1);
  p.overwrites.assign(n, -1);
  std::vector<int> root(n);
  std::iota(root.begin(), root.end(), 0);
  std::vector<char> overwritten(n, 0);
  auto planned = [&](size_t i) { return records[i].end >= 0 && records[i].nbytes > 0; };
  for (size_t k = 0; k < n; ++k) {
    const AllocationRecord& r = records[k];
    p.nodes[k] = r.node;
    p.nbytes[k] = r.nbytes;
    if (!planned(k)) {
      p.unplanned_bytes += r.nbytes;
      continue;
    }
    ++p.planned;
    p.planned_bytes += rounded(r.nbytes);
    const int o = r.overwrites;
    if (o < 0 || static_cast<size_t>(o) >= k) continue;
    const auto uo = static_cast<size_t>(o);
    const AllocationRecord& partner = records[uo];
    // The partner is the input the node read: alive when the output was made, the same size,
    // and nobody else's partner.
    if (!planned(uo) || overwritten[uo] || rounded(partner.nbytes) != rounded(r.nbytes) ||
        partner.start > r.start || partner.end < r.start)
      continue;
    overwritten[uo] = 1;
    p.overwrites[k] = o;
    ++p.in_place;
    root[static_cast<size_t>(find_root(root, static_cast<int>(k)))] = find_root(root, o);
  }

  std::vector<Group> groups(n);
  for (size_t k = 0; k < n; ++k) {
    if (!planned(k)) continue;
    Group& g = groups[static_cast<size_t>(find_root(root, static_cast<int>(k)))];
    g.size = std::max(g.size, rounded(records[k].nbytes));
    g.start = std::min(g.start, records[k].start);
    g.end = std::max(g.end, records[k].end);
  }
  std::vector<int> order;
  for (size_t k = 0; k < n; ++k)
    if (groups[k].size > 0) order.push_back(static_cast<int>(k));
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const Group &x = groups[static_cast<size_t>(a)], &y = groups[static_cast<size_t>(b)];
    return x.size != y.size ? x.size > y.size : x.start < y.start;
  });
  std::vector<int> placed;
  for (int gi : order) {
    Group& g = groups[static_cast<size_t>(gi)];
    g.offset = place(g, groups, placed);
    placed.push_back(gi);
    p.arena_bytes = std::max(p.arena_bytes, static_cast<size_t>(g.offset) + g.size);
  }
  for (size_t k = 0; k < n; ++k)
    if (planned(k))
      p.offsets[k] = groups[static_cast<size_t>(find_root(root, static_cast<int>(k)))].offset;

  // The most bytes alive at once: a lower bound for any placement of these lifetimes.
  std::vector<std::pair<int64_t, int64_t>> events;  // (time, +size or -size)
  for (int gi : order) {
    const Group& g = groups[static_cast<size_t>(gi)];
    events.emplace_back(g.start, static_cast<int64_t>(g.size));
    events.emplace_back(g.end, -static_cast<int64_t>(g.size));
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0;
  for (const auto& [time, delta] : events) {
    live += delta;
    p.live_peak_bytes =
        std::max(p.live_peak_bytes, static_cast<size_t>(std::max<int64_t>(live, 0)));
  }
  return p;
}

}  // namespace kiln::graph
