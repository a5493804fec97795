// The test suite's names for servers/temp_dir.h (shared with `idem chaos`).
#pragma once

#include "servers/temp_dir.h"

namespace idem::testing {
using servers::TempDir;
}  // namespace idem::testing
