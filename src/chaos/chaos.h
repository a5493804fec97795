// `idem chaos`: run the whole pipeline (gateway -> payments service -> PostgreSQL ledger and
// outbox -> relay -> JetStream -> consumer with the inbox) on loopback with real servers,
// drive options.ops payments through it while injecting faults, and judge the end state
// against the oracle (docs/chaos.md).
#pragma once

#include <ostream>

#include "chaos/chaos_options.h"

namespace idem::chaos {

// Runs one chaos run and prints its report to `out` (progress and errors to `err`).
// Returns the exit code (chaos/exit_code.h): 0 when every operation took effect exactly once,
// 1 when anything escaped or was lost, 2 when the run could not be set up (a server missing,
// bad options) or broke off with no verdict, 3 when it was exactly once but the harness failed
// to inject a fault it had planned.
int RunChaos(const ChaosOptions& options, std::ostream& out, std::ostream& err);

}  // namespace idem::chaos
