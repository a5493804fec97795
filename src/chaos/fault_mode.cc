#include "chaos/fault_mode.h"

namespace idem::chaos {

std::string_view FaultModeName(FaultMode mode) {
  switch (mode) {
    case FaultMode::kRetrySoon: return "retry_soon";
    case FaultMode::kRetryLater: return "retry_later";
    case FaultMode::kConcurrent: return "concurrent";
    case FaultMode::kOtherBody: return "other_body";
    case FaultMode::kGatewayKill: return "gateway_kill";
    case FaultMode::kConsumerKill: return "consumer_kill";
    case FaultMode::kRelayKill: return "relay_kill";
    case FaultMode::kRedeliveryStorm: return "redelivery_storm";
    case FaultMode::kZombie: return "zombie";
    case FaultMode::kNatsRestart: return "nats_restart";
    case FaultMode::kPostgresRestart: return "postgres_restart";
    case FaultMode::kRedisRestart: return "redis_restart";
    case FaultMode::kConsumerReplay: return "consumer_replay";
    case FaultMode::kRelayOutage: return "relay_outage";
    case FaultMode::kRetryHours: return "retry_hours";
    case FaultMode::kRetryExpired: return "retry_expired";
    case FaultMode::kNatsLeaderKill: return "nats_leader_kill";
  }
  return "?";
}

std::optional<FaultMode> ParseFaultMode(std::string_view name) {
  for (FaultMode m : kAllFaultModes) {
    if (FaultModeName(m) == name) return m;
  }
  for (FaultMode m : kOptInFaultModes) {
    if (FaultModeName(m) == name) return m;
  }
  return std::nullopt;
}

std::optional<std::vector<FaultMode>> ParseFaultList(std::string_view list, std::string* error) {
  if (list == "all") return std::vector<FaultMode>(std::begin(kAllFaultModes),
                                                   std::end(kAllFaultModes));
  std::vector<FaultMode> out;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (name.empty()) continue;
    auto mode = ParseFaultMode(name);
    if (!mode) {
      std::string known;
      for (FaultMode m : kAllFaultModes) known += (known.empty() ? "" : ", ") + std::string(FaultModeName(m));
      for (FaultMode m : kOptInFaultModes) known += ", " + std::string(FaultModeName(m));
      *error = "unknown fault mode '" + std::string(name) + "' (known: " + known + ", or all)";
      return std::nullopt;
    }
    bool seen = false;
    for (FaultMode m : out) seen = seen || m == *mode;
    if (!seen) out.push_back(*mode);
  }
  if (out.empty()) {
    *error = "no fault mode named";
    return std::nullopt;
  }
  return out;
}

int ExpectedLayer(FaultMode mode) {
  switch (mode) {
    case FaultMode::kConsumerKill:
    case FaultMode::kConsumerReplay:
    case FaultMode::kRelayOutage:
    case FaultMode::kRedeliveryStorm: return 2;
    case FaultMode::kRelayKill: return 3;
    case FaultMode::kNatsRestart:
    case FaultMode::kNatsLeaderKill:
    case FaultMode::kPostgresRestart: return 0;
    default: return 1;
  }
}

}  // namespace idem::chaos

namespace idem::chaos {

std::string WhyNotRunnable(FaultMode mode, const std::string& store, bool layer1,
                           int nats_nodes) {
  switch (mode) {
    case FaultMode::kNatsLeaderKill:
      return nats_nodes >= 3 ? "" : "needs --nats-cluster 3 (a stream leader to kill)";
    case FaultMode::kNatsRestart:
      // A cluster's nodes are killed and restarted one at a time by nats_leader_kill.
      return nats_nodes > 1 ? "needs one nats-server (with --nats-cluster, nats_leader_kill "
                              "restarts the nodes)"
                            : "";
    case FaultMode::kGatewayKill:
      return layer1 ? "" : "needs layer 1 (there is no gateway to kill)";
    case FaultMode::kRedisRestart:
      if (!layer1) return "needs layer 1 (the gateway's Redis store)";
      return store == "redis" || store == "tiered" ? "" : "needs --store redis or tiered";
    default:
      return "";
  }
}

}  // namespace idem::chaos
