// Test-only crash points: the crash tests name a point of the consume loop in the environment,
// and the process kills itself with SIGKILL when it gets there, as a power cut or an OOM kill
// would, with no chance to clean up.
//
//   IDEM_TEST_CRASH_POINT=NAME        crash the first time NAME is reached
//   IDEM_TEST_CRASH_POINT=NAME:N      crash the N-th time
//
// Unset (every production run), CrashPoint() is a load of a cached flag and returns.
// Names: consume.after_response (the service answered 2xx, not yet acked), consume.after_ack,
// runtime.before_commit, runtime.after_commit, runtime.after_ack.
#pragma once

#include <string_view>

namespace idem::worker {

// Thread safety: may be called from any thread.
void CrashPoint(std::string_view name);

}  // namespace idem::worker
