#pragma once
// The ops layer's per-thread dispatch state (Note [dispatch state] in dispatch_mode.cpp). Private
// to kiln/ops: the dispatcher, the mode stack and autocast read it.
#include <cstddef>
#include <memory>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {
class DispatchMode;
namespace detail {
struct AutocastRegion;

// Note [dispatch state]: this thread's part of the order lives in one thread_local struct that
// is constant-initialized, so a dispatch reaches all of it with one TLS address computation (from
// a shared library each distinct thread_local costs a __tls_get_addr call, which the eager add
// benchmark showed).
struct DispatchState {
  std::vector<std::shared_ptr<DispatchMode>>* stack = nullptr;  // null until the first push
  // Where a dispatch on this thread enters the order: 0 normally; inside a mode's handle(), the
  // level below that mode, so a mode does not see the ops it dispatches itself.
  size_t entry = 0;
  const Loc* kernel_loc = nullptr;
  // Inside a composite op's forward (Note [composite ops]).
  bool composite = false;
  // The active autocast region (Note [autocast]), or null.
  AutocastRegion* autocast = nullptr;
};
extern constinit thread_local DispatchState dispatch_tls;

}  // namespace detail
}  // namespace kiln
