#include "kiln/core/storage.h"

#include "kiln/core/allocation_session.h"
#include "kiln/core/allocator.h"

namespace kiln {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (!device.is_meta()) allocate_memory();
}

void Storage::allocate_memory() const {
  if (nbytes_ > 0 && current_allocation_session()) [[unlikely]] {
    const std::shared_ptr<AllocationSession>& session = current_allocation_session_handle();
    data_ = session->allocate(nbytes_, ticket_);
    session_ = session;
    return;
  }
  data_ = CachingAllocator::instance().allocate(nbytes_);
}

void Storage::free_memory() const {
  if (session_)
    session_->release(data_, ticket_);
  else if (data_)
    CachingAllocator::instance().deallocate(data_);
  data_ = nullptr;
  session_.reset();
}

void Storage::defer(std::shared_ptr<const DeferredContents> contents) {
  std::lock_guard<std::mutex> lock(deferred_mutex_);
  contents_ = std::move(contents);
  if (contents_)
    free_memory();  // written again when first asked for (Note [deferred contents])
  else if (!data_ && !device_.is_meta())
    allocate_memory();
  deferred_.store(contents_ != nullptr, std::memory_order_release);
}

std::shared_ptr<const DeferredContents> Storage::deferred() const {
  if (!deferred_.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard<std::mutex> lock(deferred_mutex_);
  return contents_;
}

void Storage::write_deferred() const {
  std::lock_guard<std::mutex> lock(deferred_mutex_);
  if (!contents_) return;  // another thread wrote them while this one waited
  if (!data_) allocate_memory();
  contents_->write(data_);  // if it throws, the contents stay deferred
  contents_.reset();
  deferred_.store(false, std::memory_order_release);
}

Storage::~Storage() {
  free_memory();
}

}  // namespace kiln
