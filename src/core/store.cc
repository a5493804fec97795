#include "idem/store.h"

#include <iterator>

namespace idem {

std::string_view RecordStateName(RecordState state) {
  switch (state) {
    case RecordState::kInFlight: return "in_flight";
    case RecordState::kCompleted: return "completed";
  }
  return "unknown";
}

std::optional<FencingToken> OwnedToken(const BeginOutcome& outcome) {
  if (const auto* a = std::get_if<Acquired>(&outcome)) return a->token;
  if (const auto* t = std::get_if<TakenOver>(&outcome)) return t->token;
  return std::nullopt;
}

std::string_view OutcomeName(const BeginOutcome& outcome) {
  static constexpr std::string_view kNames[] = {"acquired", "taken_over", "replay", "in_flight",
                                                "mismatch"};
  static_assert(std::size(kNames) == std::variant_size_v<BeginOutcome>,
                "one name per BeginOutcome alternative, in the variant's order");
  return kNames[outcome.index()];
}

std::string_view CompleteOutcomeName(CompleteOutcome outcome) {
  return outcome == CompleteOutcome::kOk ? "ok" : "fenced";
}

std::string_view ReleaseOutcomeName(ReleaseOutcome outcome) {
  return outcome == ReleaseOutcome::kReleased ? "released" : "fenced";
}

}  // namespace idem
