// MemoryStore: records in process memory, sharded by scope, each shard under its own mutex.
// For tests, benchmarks and throwaway use; everything is lost when the process exits.
//
// Sweep cost is proportional to the records that expired: each shard keeps a min-heap of expiry
// times, and stale heap entries (a record whose expiry moved) are skipped when they come due.
#pragma once

#include <memory>
#include <string_view>

#include "idem/store.h"

namespace idem {

// The settings only the memory store reads, from the query of its URL: "memory?shards=N".
struct MemoryOptions {
  // ?shards=N (1 to 65536): independently locked shards, rounded up to a power of two.
  int shards = 64;
};

// Parses the query of a memory URL (after '?', without it). kInvalidArgument names the option.
Result<MemoryOptions> ParseMemoryOptions(std::string_view query);

std::unique_ptr<Store> NewMemoryStore(const StoreOptions& options,
                                      const MemoryOptions& memory = {});

}  // namespace idem
