// A loopback TCP port that was free a moment ago, for servers (Redis, PostgreSQL) that must be
// told their port rather than pick one themselves. Another process may take it before the
// server binds it; callers retry their start on "address in use".
#pragma once

namespace idem::servers {

// Returns 0 if no port could be reserved.
int FreeLoopbackPort();

}  // namespace idem::servers
