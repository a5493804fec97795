// The oracle: every logical operation `idem chaos` intends, the fault it carries, and the
// verdict on the end state. An operation is one payment (op id, amount); its intended effect is
// exactly one row in the consumer's projection with that amount. The evidence of who stopped a
// duplicate is read from PostgreSQL after the run (docs/chaos.md, "How a catch is attributed").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "chaos/chaos_options.h"
#include "chaos/fault_mode.h"

typedef struct pg_conn PGconn;  // libpq-fe.h

namespace idem::chaos {

struct Operation {
  std::string id;                  // also the Idempotency-Key
  int64_t amount = 0;              // the intended effect
  std::optional<FaultMode> fault;  // none: a plain operation
};

// The operations of a run, drawn from options.seed: same seed, same plan.
std::vector<Operation> MakePlan(const ChaosOptions& options);

// What the end state says about one operation (counts of rows in the chaos tables).
struct Evidence {
  int charges = 0;          // times the payments service executed it
  int applied = 0;          // times the consumer applied its event
  int rejected = 0;         // deliveries the consumer's inbox refused as duplicates
  int republished = 0;      // its events the relay published more than once
  int stream_deduped = 0;   // ... and the stream dropped as duplicates
  int stored_again = 0;     // its events the stream stored more than once (at two sequences)
  int fencing_tokens = 0;   // zombie ops: distinct gateway fencing tokens that reached /charge
  int service_replays = 0;  // requests the service answered from its own key record (layer 1)
  bool gateway_replayed = false;  // the gateway answered the client with a stored response
  int outage_hit = 0;       // its events a relay outage left published and unmarked
  std::vector<int64_t> applied_amounts;  // the amount of every applied row
};

// Reads the evidence of every operation. Empty map and `error` set on a database failure.
std::map<std::string, Evidence> ReadEvidence(PGconn* conn, std::string* error);

// A planned fault the harness could not inject, or could not finish injecting (a relay armed
// to crash that did not, a replaying consumer that could not be created, a server that did not
// come back): an error of the harness, not a finding about the pipeline under test.
struct HarnessFailure {
  std::string op;  // the operation that carried the fault
  FaultMode mode;
  std::string why;
};

// One fault mode's line of the report. injected = caught + unexercised + escaped + lost.
struct ModeResult {
  int injected = 0;
  int caught[4] = {0, 0, 0, 0};  // by layer 1..3
  int unexercised = 0;           // injected, but no duplicate attempt reached any layer
  int escaped = 0;               // a duplicate (or wrong) effect
  int lost = 0;                  // the intended effect missing
  // Planned faults of this mode the harness failed to inject (or to finish injecting). One
  // that had no visible effect is counted here only, not as injected and unexercised; one that
  // still had an effect (caught, escaped, lost) is counted there too.
  int harness_failed = 0;
};

struct Verdict {
  std::map<FaultMode, ModeResult> modes;
  ModeResult plain;              // bad outcomes no fault of the operation's own explains
  int ops = 0;
  int escaped = 0;               // distinct operations with a duplicate or wrong effect
  int lost = 0;                  // distinct operations with no effect
  int injected = 0;
  int harness_failed = 0;        // distinct planned faults the harness failed to inject
};

// Judges every operation of `plan` against `evidence`. A relay kill is attributed to each
// operation whose event the relay published twice, whatever fault the operation carried.
// `harness_failures` are the planned faults the harness could not inject (several failures of
// one operation's fault count once).
Verdict Judge(const std::vector<Operation>& plan, const std::map<std::string, Evidence>& evidence,
              const std::vector<FaultMode>& modes_run,
              const std::vector<HarnessFailure>& harness_failures = {});

}  // namespace idem::chaos
