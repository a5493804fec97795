// The report of an `idem chaos` run: a table (one row per fault mode: injected, caught by
// layer 1/2/3, unexercised, escaped, lost, and the planned faults the harness failed to inject)
// or one JSON object with the same rows and the totals `injected`, `escaped`, `lost` and
// `harness_failed` at the top level (docs/chaos.md shows both). Errors of the harness itself are
// listed apart from what the clients saw.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "chaos/chaos_options.h"
#include "chaos/oracle.h"

namespace idem::chaos {

struct RunFacts {
  double seconds = 0;
  int relay_crashes = 0;
  int gateway_kills = 0;
  int consumer_kills = 0;
  int nats_restarts = 0;
  int postgres_restarts = 0;
  int fenced_completions = 0;  // late (zombie) completions the gateways refused
  int redis_restarts = 0;
  int consumer_replays = 0;  // replaying consumers run (consumer_replay)
  std::vector<std::string> problems;  // client-side surprises (ops never answered, ...)
  // Errors of the harness itself: each planned fault it could not inject and why ("op-1-3
  // consumer_replay: ..."), and the pipeline's last error if no such line says it already.
  std::vector<std::string> harness_errors;
  int nats_admin_replaced = 0;  // the harness's NATS connection found closed and replaced
  std::vector<std::string> skipped;   // "mode: why" for modes this run could not inject
};

void PrintTable(const ChaosOptions& options, const Verdict& verdict, const RunFacts& facts,
                std::ostream& out);
void PrintJson(const ChaosOptions& options, const Verdict& verdict, const RunFacts& facts,
               std::ostream& out);

}  // namespace idem::chaos
