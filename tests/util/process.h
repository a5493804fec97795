// The test suite's names for servers/process.h (shared with `idem chaos`).
#pragma once

#include "servers/process.h"

namespace idem::testing {
using servers::RunAs;
using servers::Process;
using servers::AddressAfter;
}  // namespace idem::testing
