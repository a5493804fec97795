#include "core/record_machine.h"

#include <algorithm>

namespace idem::internal {

BeginDecision DecideBegin(const RecordHead* existing, const Fingerprint& fingerprint,
                          TimePoint now) {
  if (existing == nullptr || !IsLive(*existing, now)) return {BeginAction::kAcquire};
  if (existing->fingerprint != fingerprint) return {BeginAction::kMismatch};
  if (existing->state == RecordState::kCompleted) return {BeginAction::kReplay};
  if (now >= existing->lease_deadline) return {BeginAction::kTakeOver};
  return {BeginAction::kInFlight, std::max(Duration(1), existing->lease_deadline - now)};
}

bool OwnsInFlight(const RecordHead* existing, FencingToken token, TimePoint now) {
  return existing != nullptr && IsLive(*existing, now) &&
         existing->state == RecordState::kInFlight && existing->token == token;
}

}  // namespace idem::internal
