#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace kiln {

// Intra-op parallelism. kiln uses OpenMP, the runtime oneDNN itself uses, so one thread count
// governs both.
void set_num_threads(int n);
int get_num_threads();

// Calls f(chunk_begin, chunk_end) over [begin, end) split into chunks of at least `grain`
// elements. Runs inline when the range is small or when already inside a parallel region.
// Chunk boundaries depend on the thread count, so f must not make results depend on them.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& f) {
  int64_t n = end - begin;
  if (n <= 0) return;
  int threads = omp_in_parallel() ? 1 : get_num_threads();
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (chunks <= 1) {
    f(begin, end);
    return;
  }
#pragma omp parallel for num_threads(static_cast <int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t b = begin + n * c / chunks;
    int64_t e = begin + n * (c + 1) / chunks;
    f(b, e);
  }
}

}  // namespace kiln
