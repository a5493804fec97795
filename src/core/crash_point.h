// Crash points for tests: named places where a test makes the process die, as a power cut or an
// OOM kill would, with no chance to clean up, or hang, as a stalled host would. Compiled into
// every build and inert unless armed: in a run whose environment names none (every production
// run), reaching a point costs one load of a flag read once.
//
// Armed by one environment variable, read at the first point the process reaches:
//
//   IDEM_TEST_CRASH_POINT=NAME           SIGKILL the first time NAME is reached
//   IDEM_TEST_CRASH_POINT=NAME:N         SIGKILL the N-th time (N >= 1)
//   IDEM_TEST_CRASH_POINT=NAME:stop      SIGSTOP the first time, once: the process hangs until
//   IDEM_TEST_CRASH_POINT=NAME:N:stop    a SIGCONT, then carries on (the N-th time)
//
// A value of another form arms nothing and says so on standard error. Before the signal, the
// process writes one line naming the point to standard error.
//
// The points:
//   consume.after_response   idem consume: the service answered 2xx, the message is not acked
//   consume.after_ack        idem consume: the message is acked
//   runtime.before_commit    JetStreamConsumer: the handler ran, its transaction not committed
//   runtime.after_commit     JetStreamConsumer: committed, not acked
//   runtime.after_ack        JetStreamConsumer: acked
//   relay.after_publish      idem relay: a batch's PubAcks are in, its rows not marked
//   service.before_commit    the tests' ledger service, before its COMMIT
//   service.after_commit     ... and after it
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace idem::internal {

// What a value of IDEM_TEST_CRASH_POINT arms.
struct CrashPointSpec {
  std::string name;
  long nth = 1;       // the time it fires, counting from 1
  bool stop = false;  // SIGSTOP once, instead of SIGKILL
};
// NAME, NAME:N, NAME:stop or NAME:N:stop; nullopt for anything else (an empty name, N < 1).
std::optional<CrashPointSpec> ParseCrashPoint(std::string_view value);

// Reached `name`: kills or stops the process here if IDEM_TEST_CRASH_POINT arms this point and
// this is the time it names; else returns at once.
// Thread safety: may be called from any thread.
void CrashPoint(std::string_view name);

}  // namespace idem::internal
