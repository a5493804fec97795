// The gateway logs through the daemons' event log (log/event_log.h): its request lines and its
// lifecycle events.
#pragma once

#include "log/event_log.h"

namespace idem::gateway {

using logging::Log;
using logging::RequestLogLine;

}  // namespace idem::gateway
