#include "kiln/core/storage.h"

#include "kiln/core/allocator.h"

namespace kiln {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (!device.is_meta()) data_ = CachingAllocator::instance().allocate(nbytes);
}

Storage::~Storage() {
  if (data_) CachingAllocator::instance().deallocate(data_);
}

}  // namespace kiln
