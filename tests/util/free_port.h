// The test suite's names for servers/free_port.h (shared with `idem chaos`).
#pragma once

#include "servers/free_port.h"

namespace idem::testing {
using servers::FreeLoopbackPort;
}  // namespace idem::testing
