#include "gateway/startup.h"

#include <string>

#include "core/text.h"

namespace idem::gateway {

bool FollowClockOffset(GatewayOptions& options, Log& log,
                       std::unique_ptr<ClockOffsetFile>& clock_offset) {
  if (options.unsafe_clock_offset_file.empty()) return true;
  auto opened = ClockOffsetFile::Open(options.unsafe_clock_offset_file, options.clock);
  if (!opened.ok()) {
    log.Error("config", std::string(opened.status().message()));
    return false;
  }
  clock_offset = std::move(*opened);
  options.clock = clock_offset->clock();
  log.Warn("clock", "UNSAFE, FOR TESTING ONLY: --unsafe-clock-offset-file " +
                        clock_offset->path() + ": the gateway's clock runs " +
                        std::to_string(clock_offset->offset().count()) +
                        " ms ahead and follows the file; leases and retention expire early");
  return true;
}

std::unique_ptr<Store> OpenGatewayStore(const GatewayOptions& options, Log& log) {
  StoreOptions store_options;
  store_options.clock = options.clock;  // the store and the gateway read the same clock
  store_options.durable_store = options.durable_store;
  auto store = OpenStore(options.store, store_options);
  if (store.ok()) return std::move(*store);
  log.Error("store", "cannot open store '" + internal::RedactUrlPassword(options.store) + "'" +
                         (options.durable_store.empty()
                              ? std::string()
                              : " with durable store '" +
                                    internal::RedactUrlPassword(options.durable_store) + "'") +
                         ": " + store.status().ToString());
  return nullptr;
}

UpstreamOptions UpstreamOptionsOf(const GatewayOptions& options) {
  UpstreamOptions upstream_options;
  upstream_options.connect_timeout = options.upstream_connect_timeout;
  upstream_options.response_timeout = options.upstream_response_timeout;
  upstream_options.idle_timeout = options.upstream_idle_timeout;
  upstream_options.max_idle = options.upstream_pool_size;
  upstream_options.max_response_body = options.max_upstream_response;
  return upstream_options;
}

void WarnShortLeases(const GatewayOptions& options, Log& log) {
  for (const RoutePolicy& route : options.routes) {
    if (route.key != KeyRequirement::kOff && route.lease < options.upstream_response_timeout) {
      log.Warn("config", "route " + (route.method.empty() ? "*" : route.method) + " " +
                             route.path_prefix + ": lease " + std::to_string(route.lease.count()) +
                             " ms is shorter than upstream_response_timeout; a retry may take "
                             "over while the first attempt still runs, so the upstream must "
                             "check Idempotency-Fencing-Token");
    }
  }
}

}  // namespace idem::gateway
