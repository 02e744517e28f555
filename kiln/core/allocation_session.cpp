#include "kiln/core/allocation_session.h"

namespace kiln {

namespace {
thread_local std::shared_ptr<AllocationSession> tls_session;
}  // namespace

AllocationSession* current_allocation_session() {
  return tls_session.get();
}

const std::shared_ptr<AllocationSession>& current_allocation_session_handle() {
  return tls_session;
}

AllocationSessionScope::AllocationSessionScope(std::shared_ptr<AllocationSession> session)
    : previous_(std::move(tls_session)) {
  tls_session = std::move(session);
}

AllocationSessionScope::~AllocationSessionScope() {
  tls_session = std::move(previous_);
}

}  // namespace kiln
