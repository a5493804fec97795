// `idem consume --batch-size N`: how the messages ready at one moment are cut into batches.
// A pure function over keys and sequences, unit-tested on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace idem::worker {

// One ready message, as far as cutting batches cares.
struct BatchCandidate {
  std::string_view idempotency_key;
  std::optional<std::string_view> ordering_key;
  uint64_t stream_sequence = 0;
};

// Cuts `ready` into batches of at most `max_batch` messages: as few batches as that allows,
// of nearly equal sizes (so 40 ready messages with a maximum of 32 go as 20 and 20, not 32 and
// 8), each in stream-sequence order. No batch holds two messages with the same idempotency key
// (the service's answer names items by key) or the same ordering key (per-key order: the
// scheduler never has two of one key ready at once; this keeps it so regardless); a message
// that would conflict goes to another batch. Returns indexes into `ready`.
// REQUIRES: max_batch >= 1.
std::vector<std::vector<size_t>> PlanBatches(const std::vector<BatchCandidate>& ready,
                                             size_t max_batch);

}  // namespace idem::worker
