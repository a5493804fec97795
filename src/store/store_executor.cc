#include "store/store_executor.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace idem {

StoreExecutor::StoreExecutor(Store& store, Options options)
    : store_(store),
      hooks_(internal::HooksOf(store)),
      write_queue_(internal::WriteQueueOf(store)),
      shared_replays_(internal::SharedReplaysOf(store)),
      max_pending_(std::max(1, options.max_pending)),
      pool_(static_cast<size_t>(std::max(1, options.threads))) {}

StoreExecutor::~StoreExecutor() {
  pool_.join();
  // A submitted write may still be queued in the store after the pool thread that submitted it
  // went idle: wait for its completion too. (Polled: a completion's last touch of this object
  // is its decrement, so nothing may wake us after it.)
  while (pending_.load(std::memory_order_acquire) != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace idem
