// The steps RunGateway (server.cc) takes before it serves: the test-only clock offset file, the
// store, the upstream pool's options, and the warnings a configuration deserves.
#pragma once

#include <memory>

#include "gateway/access_log.h"
#include "gateway/clock_offset_file.h"
#include "gateway/upstream_pool.h"
#include "idem/gateway_options.h"
#include "idem/store.h"

namespace idem::gateway {

// Opens the test-only clock offset file, if `options` names one, into `clock_offset`, and points
// `options.clock` at it. False: it could not be opened (logged).
bool FollowClockOffset(GatewayOptions& options, Log& log,
                       std::unique_ptr<ClockOffsetFile>& clock_offset);

// The store `options` name, read with the gateway's clock; null if it cannot be opened (logged).
std::unique_ptr<Store> OpenGatewayStore(const GatewayOptions& options, Log& log);

// The upstream pool's options, from the gateway's.
UpstreamOptions UpstreamOptionsOf(const GatewayOptions& options);

// Warns of each route whose lease is shorter than upstream_response_timeout: a retry may take
// over while the first attempt still runs.
void WarnShortLeases(const GatewayOptions& options, Log& log);

}  // namespace idem::gateway
