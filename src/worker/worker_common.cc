#include "worker/worker_common.h"

#include <string>

#include "core/enum_names.h"

namespace idem::worker {

std::string_view TransitionOutcomeName(TransitionOutcome outcome) {
  using enum TransitionOutcome;
  static constexpr internal::EnumName<TransitionOutcome> kNames[] = {
      {kApplied, "applied"}, {kAlready, "already"}, {kRefused, "refused"}};
  return internal::NameOf(kNames, outcome, "unknown");
}

}  // namespace idem::worker

namespace idem::internal::worker {

using idem::worker::kNoState;
using idem::worker::TransitionOutcome;
using idem::worker::TransitionOutcomeName;

Status RequireNonEmpty(std::string_view op, std::initializer_list<std::string_view> values) {
  for (std::string_view v : values) {
    if (v.empty()) return InvalidArgumentError(std::string(op) + ": arguments must be non-empty");
  }
  return Status::Ok();
}

Status CheckTransition(std::string_view kind, std::string_view id, std::string_view to_state) {
  IDEM_RETURN_IF_ERROR(RequireNonEmpty("transition", {kind, id, to_state}));
  if (to_state == kNoState) {
    return InvalidArgumentError("transition: to_state cannot be \"none\" (the state of no entity)");
  }
  return Status::Ok();
}

Result<TransitionOutcome> ParseTransitionOutcome(std::string_view text) {
  for (TransitionOutcome o :
       {TransitionOutcome::kApplied, TransitionOutcome::kAlready, TransitionOutcome::kRefused}) {
    if (text == TransitionOutcomeName(o)) return o;
  }
  return DataLossError("transition: unknown outcome \"" + std::string(text) + "\"");
}

}  // namespace idem::internal::worker
