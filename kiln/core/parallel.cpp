#include "kiln/core/parallel.h"

#include "kiln/core/error.h"

namespace kiln {

void set_num_threads(int n) {
  if (n < 1)
    throw Error(fmt::format("[set_num_threads] expected a thread count >= 1, but got {}", n));
  omp_set_num_threads(n);
}

int get_num_threads() {
  return omp_get_max_threads();
}

}  // namespace kiln
