// MemoryStore: records in process memory, sharded by scope, each shard under its own mutex.
// For tests, benchmarks and throwaway use; everything is lost when the process exits.
//
// Sweep cost is proportional to the records that expired: each shard keeps a min-heap of expiry
// times, and stale heap entries (a record whose expiry moved) are skipped when they come due.
#pragma once

#include <memory>

#include "idem/store.h"

namespace idem {

std::unique_ptr<Store> NewMemoryStore(const StoreOptions& options);

}  // namespace idem
