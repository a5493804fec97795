// What the PostgreSQL and SQLite flavours of the worker layer share: argument checks and the
// transition outcome's names, so both answer bad input and outcomes the same way.
#pragma once

#include <initializer_list>
#include <string_view>

#include "idem/status.h"
#include "idem/worker.h"

namespace idem::internal::worker {

// kInvalidArgument naming `op` when any of `values` is empty.
Status RequireNonEmpty(std::string_view op, std::initializer_list<std::string_view> values);

// kInvalidArgument for an empty kind, id or to_state, or to_state "none".
Status CheckTransition(std::string_view kind, std::string_view id, std::string_view to_state);

// "applied" / "already" / "refused"; kDataLoss for anything else.
Result<idem::worker::TransitionOutcome> ParseTransitionOutcome(std::string_view text);

}  // namespace idem::internal::worker
