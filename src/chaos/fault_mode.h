// The fault modes `idem chaos` injects, their names on the command line and in reports, and the
// layer expected to catch each (seed table "what each layer catches"; docs/chaos.md).
#pragma once

#include <chrono>
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
  kRetryHours,       // ... again at the end, with the clocks moved kHoursLater (within retention)
  kRetryExpired,     // ... again at the end, with the clocks moved past every retention
  kNatsLeaderKill,   // the R3 stream's leader node SIGKILLed (--nats-cluster 3), then restarted
};

inline constexpr FaultMode kAllFaultModes[] = {
    FaultMode::kRetrySoon,   FaultMode::kRetryLater,   FaultMode::kConcurrent,
    FaultMode::kOtherBody,   FaultMode::kGatewayKill,  FaultMode::kConsumerKill,
    FaultMode::kRelayKill,   FaultMode::kRedeliveryStorm, FaultMode::kZombie,
    FaultMode::kNatsRestart, FaultMode::kPostgresRestart, FaultMode::kRedisRestart,
    FaultMode::kConsumerReplay, FaultMode::kRelayOutage, FaultMode::kRetryHours,
    FaultMode::kNatsLeaderKill};
// Modes run only when named in --faults (not by "all"): they demonstrate a limit instead of
// checking a promise, so they make the run fail by design. retry_expired: a retry after every
// retention has passed is a new request to every layer and counts as escaped.
inline constexpr FaultMode kOptInFaultModes[] = {FaultMode::kRetryExpired};

// How far retry_hours moves the gateway's clock and the payments service's: hours, within the
// 24 h both keep a completed key.
inline constexpr std::chrono::hours kHoursLater{3};
// How far retry_expired moves them: past the 24 h retention of both.
inline constexpr std::chrono::hours kPastRetention{25};

// Whether `mode` needs the gateway's and the service's clocks moved at the end of the run.
inline bool MovesTheClock(FaultMode mode) {
  return mode == FaultMode::kRetryHours || mode == FaultMode::kRetryExpired;
}

// "retry_soon", "retry_later", "concurrent", "other_body", "gateway_kill", "consumer_kill",
// "relay_kill", "redelivery_storm", "zombie", "nats_restart", "postgres_restart",
// "redis_restart", "consumer_replay", "relay_outage", "retry_hours", "retry_expired",
// "nats_leader_kill".
std::string_view FaultModeName(FaultMode mode);
// The mode named `name` (opt-in modes included), or nullopt.
std::optional<FaultMode> ParseFaultMode(std::string_view name);
// A comma-separated list of names, or "all" (every mode but the opt-in ones). Nullopt (and `error` set) on an unknown name.
std::optional<std::vector<FaultMode>> ParseFaultList(std::string_view list, std::string* error);
// The layer that is meant to catch `mode`: 1 ingest, 2 worker, 3 emit; 0 for a server restart,
// whose duplicates (if any) may reach any layer.
int ExpectedLayer(FaultMode mode);
// Why `mode` cannot run in a run with these settings ("needs --store redis"), or "" if it can.
// `nats_nodes`: the nodes of the NATS cluster the run starts (1: one nats-server).
std::string WhyNotRunnable(FaultMode mode, const std::string& store, bool layer1,
                           int nats_nodes = 1);

}  // namespace idem::chaos
