#pragma once
// Note [fault injection]
// ~~~~~~~~~~~~~~~~~~~~~~
// The file and directory steps kiln takes to save data (atomic file writes, directory
// transactions) can be made to fail on purpose, so that tests prove a failure at any step leaves
// the previous data intact. Each family of steps has one process-wide FaultPoint; before a step
// runs it asks its point, and a nonzero answer makes the step fail as if the system call had set
// errno to that value. Without a hook installed a check is one lock and one empty test.
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace kiln::io {

// Called with the step's name and the path it acts on; returns an errno value, or 0 to let the
// step run.
using FaultHook = std::function<int(std::string_view step, const std::string& path)>;

class FaultPoint {
 public:
  // An empty function removes the hook.
  void set(FaultHook hook);
  // The errno the hook injects for `step`, or 0.
  int check(std::string_view step, const std::string& path) const;

 private:
  mutable std::mutex mutex_;
  FaultHook hook_;
};

// Installs a hook on a point for the lifetime of the guard (tests).
class ScopedFault {
 public:
  ScopedFault(FaultPoint& point, FaultHook hook) : point_(point) { point_.set(std::move(hook)); }
  ~ScopedFault() { point_.set({}); }
  ScopedFault(const ScopedFault&) = delete;
  ScopedFault& operator=(const ScopedFault&) = delete;

 private:
  FaultPoint& point_;
};

}  // namespace kiln::io
