// The test suite's names for servers/http_client.h (shared with `idem chaos`).
#pragma once

#include "servers/http_client.h"

namespace idem::testing {
using servers::HttpResponse;
using servers::Http;
using servers::RawExchange;
}  // namespace idem::testing
