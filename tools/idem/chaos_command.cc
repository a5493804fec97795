#include "chaos_command.h"

#include <algorithm>
#include <cstdint>
#include <iostream>

#include "chaos/chaos.h"
#include "idem/status.h"
#include "subcommand.h"

namespace idem::cli {
namespace {

constexpr const char* kChaosDescription =
    "Prove exactly-once effects end to end. Starts the whole pipeline on loopback with real\n"
    "servers in temporary directories (PostgreSQL 15, nats-server -js, Redis for that store):\n"
    "  client -> idem gateway -> a payments service (key record, charge and outbox event in\n"
    "  one PostgreSQL transaction) -> idem relay -> JetStream -> idem consume -> an apply\n"
    "  service (inbox claim and effect in one transaction)\n"
    "sends --ops payments (or --duration seconds of them) through it while injecting faults,\n"
    "then checks every payment took effect exactly once. Prints, per fault mode: injected,\n"
    "caught by layer 1 (ingest), 2 (worker) or 3 (emit), unexercised, escaped (a duplicate\n"
    "effect), lost (a missing one) and harness failed (planned, but the harness could not\n"
    "inject it; the reason is printed below the table).\n"
    "Exit codes: 0: exactly once, every planned fault injected; 1: something escaped or was\n"
    "lost (wins over 3); 2: bad flags, the run could not be set up, or it broke off with no\n"
    "verdict; 3: exactly once, but the harness failed to inject a planned fault.\n\n"
    "Fault modes: retry_soon, retry_later, concurrent, other_body, gateway_kill,\n"
    "consumer_kill, relay_kill, redelivery_storm, zombie, nats_restart, postgres_restart,\n"
    "redis_restart (only with --store redis or tiered), consumer_replay, relay_outage, retry_hours\n"
    "(the retry 3 h later by the gateway's clock, moved through its test-only\n"
    "--unsafe-clock-offset-file), and, only when named (not in 'all'), retry_expired: a retry\n"
    "25 h later, past every retention, which escapes by design (docs/chaos.md says how each\n"
    "is injected). nats_leader_kill (only with --nats-cluster 3) SIGKILLs the node that leads\n"
    "the replicated stream and restarts it once another node leads.\n\n"
    "Examples:\n"
    "  idem chaos --ops 1000 --seed 7\n"
    "  idem chaos --duration 600 --faults gateway_kill,relay_kill\n"
    "  idem chaos --nats-cluster 3 --ops 200 --faults nats_leader_kill,consumer_kill\n"
    "  idem chaos --ops 300 --disable-layer 1 --faults retry_soon,concurrent   # exit 1";

struct ChaosFlags {
  chaos::ChaosOptions options;
  std::string faults = "all";
  std::vector<int> disabled;
  bool quiet = false;
  CLI::Option* ops = nullptr;  // count() 0: not given, worked out from --duration
};

// How much to run, which faults, and which layers.
void AddChaosPlanFlags(CLI::App& cmd, ChaosFlags& flags) {
  flags.ops = cmd.add_option("--ops", flags.options.ops,
                             "Logical operations (payments) to run; with --duration, the most "
                             "to run")
                  ->capture_default_str()
                  ->check(CLI::Range(1, 10'000'000));
  cmd.add_option("--duration", flags.options.duration_seconds,
                 "Send operations for this many seconds instead of a number of them (the\n"
                 "pipeline then settles and the report covers the operations sent)")
      ->check(CLI::Range(1, 7 * 24 * 3600));
  cmd.add_option("--seed", flags.options.seed,
                 "Seed of the plan (which operation carries which fault; same seed, same plan)")
      ->capture_default_str();
  cmd.add_option("--faults", flags.faults, "Comma-separated fault modes, or 'all'")
      ->capture_default_str();
  cmd.add_option("--fault-rate", flags.options.fault_rate,
                 "Share of operations that carry a fault (0 to 1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--disable-layer", flags.disabled,
                 "Turn a layer off to see what it is worth (repeatable): 1 = requests bypass the\n"
                 "gateway and the service records no key; 2 = the consumer claims no inbox row;\n"
                 "3 = the stream keeps no useful duplicate window (100 ms), so republished\n"
                 "events reach the consumer")
      ->check(CLI::IsMember({1, 2, 3}));
}

// The store, the servers to use or start, the clients, and the output.
void AddChaosSetupFlags(CLI::App& cmd, ChaosFlags& flags) {
  cmd.add_option("--store", flags.options.store,
                 "The gateway's store: sqlite, memory, redis, postgresql, or tiered (Redis\n"
                 "without persistence in front of PostgreSQL: redis_restart loses everything\n"
                 "Redis held)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sqlite", "memory", "redis", "postgresql", "tiered"}));
  cmd.add_option("--postgres", flags.options.postgres_url,
                 "Use this running PostgreSQL (postgresql://USER[:PASS]@HOST:PORT/DB, a role that\n"
                 "may CREATE DATABASE) instead of starting one: the run creates its databases on\n"
                 "it and drops them at the end; postgres_restart is left out");
  cmd.add_option("--nats", flags.options.nats_url,
                 "Use this running nats-server (nats://HOST:PORT, JetStream on) instead of\n"
                 "starting one: the run creates a stream CHAOS_<run> and deletes it at the end;\n"
                 "nats_restart is left out");
  cmd.add_option("--nats-cluster", flags.options.nats_cluster,
                 "Start this many NATS nodes: 1, one nats-server; 3, a cluster with the stream\n"
                 "replicated on all three (R3), the relay and the consumer given every node's\n"
                 "URL; nats_leader_kill needs it, nats_restart is left out")
      ->capture_default_str()
      ->check(CLI::IsMember({1, 3}));
  cmd.add_option("--redis", flags.options.redis_url,
                 "With --store redis: use this running Redis (redis://...) instead of starting\n"
                 "one; the gateway's keys get a prefix of the run's own; redis_restart is left\n"
                 "out");
  cmd.add_option("--clients", flags.options.clients, "Client threads sending payments")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd.add_option("--logs", flags.options.logs_dir,
                 "Copy the logs of every process the run started (gateway, relay, consume, and\n"
                 "the servers it started) into this directory, whatever the outcome. Without it,\n"
                 "a run with a duplicate, a loss or no verdict keeps them in a new directory\n"
                 "under the temporary directory and names it on standard error")
      ->type_name("DIR");
  cmd.add_flag("--json", flags.options.json,
               "Print one JSON object: the totals injected, escaped and lost, and a row per mode");
  cmd.add_flag("--quiet", flags.quiet, "No progress line on standard error");
}

void AddChaosFlags(CLI::App& cmd, ChaosFlags& flags) {
  AddChaosPlanFlags(cmd, flags);
  AddChaosSetupFlags(cmd, flags);
}

// The flags' faults, layers and operation count on flags.options, checked together.
Status CompleteChaosOptions(ChaosFlags& flags) {
  chaos::ChaosOptions& o = flags.options;
  std::string error;
  auto faults = chaos::ParseFaultList(flags.faults, &error);
  if (!faults) return InvalidArgumentError("--faults: " + error);
  // "all": every mode this run can inject (the report names the ones it cannot).
  if (flags.faults != "all") o.faults = *faults;
  if (o.nats_cluster > 1 && !o.nats_url.empty()) {
    return InvalidArgumentError(
        "--nats-cluster starts its own nodes; it cannot be combined with --nats");
  }
  const bool leader_kill = std::find(o.faults.begin(), o.faults.end(),
                                     chaos::FaultMode::kNatsLeaderKill) != o.faults.end();
  if (leader_kill && o.nats_cluster < 3) {
    return InvalidArgumentError(
        "--faults nats_leader_kill needs --nats-cluster 3 (a replicated stream whose leader "
        "can be killed)");
  }
  o.disabled_layers = {flags.disabled.begin(), flags.disabled.end()};
  o.progress = !flags.quiet;
  if (o.duration_seconds > 0 && flags.ops->count() == 0) {
    // No count given: a plan longer than any run of that length sends (about 500 per second).
    o.ops = static_cast<int>(std::min<int64_t>(10'000'000, int64_t{o.duration_seconds} * 500));
  }
  return Status::Ok();
}

int RunChaosCommand(ChaosFlags& flags) {
  if (Status s = CompleteChaosOptions(flags); !s.ok()) {
    std::cerr << "idem chaos: " << s.message() << "\n";
    return 2;
  }
  return chaos::RunChaos(flags.options, std::cout, std::cerr);
}

}  // namespace

std::function<int()> AddChaosCommand(CLI::App& app) {
  return AddSubcommand<ChaosFlags>(app, "chaos", kChaosDescription, AddChaosFlags,
                                   RunChaosCommand);
}

}  // namespace idem::cli
