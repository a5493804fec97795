// The fault modes `idem chaos` injects, their names on the command line and in reports, and the
// layer expected to catch each (seed table "what each layer catches"; docs/chaos.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idem::chaos {

enum class FaultMode {
  kRetrySoon,        // the client sends the same request again right after the answer
  kRetryLater,       // ... again at the end of the run, after every other fault
  kConcurrent,       // three copies of the request at once
  kOtherBody,        // the same key with another body
  kGatewayKill,      // the gateway SIGKILLed while the request is in flight, then restarted
  kConsumerKill,     // the consumer SIGKILLed after its commit, before its ack
  kRelayKill,        // the relay SIGKILLed after the PubAcks, before marking the rows
  kRedeliveryStorm,  // the same message redelivered again and again after it was applied
  kZombie,           // the service hangs past the lease; a retry takes over; the hung one finishes
  kNatsRestart,      // nats-server SIGKILLed and restarted on the same port and store
  kPostgresRestart,  // PostgreSQL's postmaster SIGKILLed and restarted on the same data dir
  kRedisRestart,     // the gateway's redis-server SIGKILLed with the request in flight, restarted
  kConsumerReplay,   // a second consumer re-reads the stream from the event's sequence
  kRelayOutage,      // the relay killed after publish, before mark, down past the dup window
};

inline constexpr FaultMode kAllFaultModes[] = {
    FaultMode::kRetrySoon,   FaultMode::kRetryLater,   FaultMode::kConcurrent,
    FaultMode::kOtherBody,   FaultMode::kGatewayKill,  FaultMode::kConsumerKill,
    FaultMode::kRelayKill,   FaultMode::kRedeliveryStorm, FaultMode::kZombie,
    FaultMode::kNatsRestart, FaultMode::kPostgresRestart, FaultMode::kRedisRestart,
    FaultMode::kConsumerReplay, FaultMode::kRelayOutage};

// "retry_soon", "retry_later", "concurrent", "other_body", "gateway_kill", "consumer_kill",
// "relay_kill", "redelivery_storm", "zombie", "nats_restart", "postgres_restart",
// "redis_restart", "consumer_replay", "relay_outage".
std::string_view FaultModeName(FaultMode mode);
// The mode named `name`, or nullopt.
std::optional<FaultMode> ParseFaultMode(std::string_view name);
// A comma-separated list of names, or "all". Nullopt (and `error` set) on an unknown name.
std::optional<std::vector<FaultMode>> ParseFaultList(std::string_view list, std::string* error);
// The layer that is meant to catch `mode`: 1 ingest, 2 worker, 3 emit; 0 for a server restart,
// whose duplicates (if any) may reach any layer.
int ExpectedLayer(FaultMode mode);
// Why `mode` cannot run in a run with these settings ("needs --store redis"), or "" if it can.
std::string WhyNotRunnable(FaultMode mode, const std::string& store, bool layer1);

}  // namespace idem::chaos
