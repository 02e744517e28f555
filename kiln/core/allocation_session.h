#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace kiln {

// Note [allocation sessions]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A session takes over the tensor allocations one thread makes for a while: while a session is
// current on a thread (AllocationSessionScope), every Storage that thread creates with memory asks
// the session for it, and the Storage keeps the session alive and hands its memory back to the
// same session when it dies, on whatever thread and at whatever time that happens (a tensor may
// outlive the session's scope). The graph executor's memory planner (Note [memory planner] in
// graph/memory_plan.h) uses one to record a run's allocations and, on later runs, to serve them
// from offsets in one arena. Allocations on other threads (a kernel's worker threads) and zero-byte
// ones never reach a session. Without a session, memory comes from the caching allocator.
class AllocationSession {
 public:
  virtual ~AllocationSession() = default;
  // Returns memory for nbytes (> 0), aligned to CachingAllocator::kAlignment, and a ticket that
  // release() gets back with it. Throws OutOfMemoryError as the caching allocator does.
  virtual void* allocate(size_t nbytes, int64_t& ticket) = 0;
  // Takes back memory allocate() returned; may run on any thread, after the scope ended.
  virtual void release(void* data, int64_t ticket) = 0;
};

// This thread's current session, or null.
AllocationSession* current_allocation_session();
// The current session as a shared handle, for a Storage to keep.
const std::shared_ptr<AllocationSession>& current_allocation_session_handle();

// Makes `session` current on this thread for the scope's lifetime (the previous one, usually
// none, is restored after). Scopes nest.
class AllocationSessionScope {
 public:
  explicit AllocationSessionScope(std::shared_ptr<AllocationSession> session);
  ~AllocationSessionScope();
  AllocationSessionScope(const AllocationSessionScope&) = delete;
  AllocationSessionScope& operator=(const AllocationSessionScope&) = delete;

 private:
  std::shared_ptr<AllocationSession> previous_;
};

}  // namespace kiln
