#include "chaos/report.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "chaos/exit_code.h"

namespace idem::chaos {
namespace {

std::string Layers(const std::set<int>& disabled) {
  std::string s;
  for (int l : {1, 2, 3}) {
    if (!disabled.count(l)) s += (s.empty() ? "" : ",") + std::to_string(l);
  }
  return s.empty() ? "none" : s;
}

constexpr char kRowFormat[] = "{:<18} {:>9} {:>8} {:>8} {:>8} {:>12} {:>8} {:>6} {:>15}\n";

std::string Row(std::string_view name, const ModeResult& r, bool with_injected) {
  return fmt::format(kRowFormat, name, with_injected ? std::to_string(r.injected) : "-",
                     r.caught[1], r.caught[2], r.caught[3], r.unexercised, r.escaped, r.lost,
                     with_injected ? std::to_string(r.harness_failed) : "-");
}

std::string VerdictLine(const Verdict& v) {
  switch (ExitCode({.escaped = v.escaped, .lost = v.lost, .harness_failed = v.harness_failed})) {
    case kExitNotExactlyOnce:
      return "verdict: NOT exactly once\n";
    case kExitHarnessFailed:
      return fmt::format(
          "verdict: exactly once for the faults injected, but the harness failed to inject {} "
          "planned fault{} (the harness lines above say why)\n",
          v.harness_failed, v.harness_failed == 1 ? "" : "s");
    default:
      return "verdict: exactly once\n";
  }
}

}  // namespace

void PrintTable(const ChaosOptions& options, const Verdict& v, const RunFacts& facts,
                std::ostream& out) {
  out << fmt::format("idem chaos: seed {}, {} operations, gateway store {}, layers on: {}\n\n",
                     options.seed, v.ops, options.store, Layers(options.disabled_layers));
  out << fmt::format(kRowFormat, "fault mode", "injected", "layer 1", "layer 2", "layer 3",
                     "unexercised", "escaped", "lost", "harness failed");
  for (const auto& [mode, r] : v.modes) out << Row(FaultModeName(mode), r, true);
  out << Row("(collateral)", v.plain, false);
  std::string redis;  // only a run on the Redis or tiered store restarts it
  if (options.store == "redis" || options.store == "tiered") redis = fmt::format(", Redis {}", facts.redis_restarts);
  out << fmt::format(
      "\ntotal: {} injected, {} escaped, {} lost (distinct operations); {:.1f} s\n"
      "processes killed: gateway {}, consumer {}, relay {}, nats-server {}, PostgreSQL {}{}; "
      "late completions fenced by the gateway: {}\n",
      v.injected, v.escaped, v.lost, facts.seconds, facts.gateway_kills, facts.consumer_kills,
      facts.relay_crashes, facts.nats_restarts, facts.postgres_restarts,
      redis,
      facts.fenced_completions);
  for (const auto& s : facts.skipped) out << "not injected: " << s << "\n";
  for (const auto& p : facts.problems) out << "client: " << p << "\n";
  for (const auto& e : facts.harness_errors) out << "harness: " << e << "\n";
  if (facts.nats_admin_replaced > 0) {
    out << fmt::format("harness: its NATS connection was found closed and replaced {} time{}\n",
                       facts.nats_admin_replaced, facts.nats_admin_replaced == 1 ? "" : "s");
  }
  out << VerdictLine(v);
}

void PrintJson(const ChaosOptions& options, const Verdict& v, const RunFacts& facts,
               std::ostream& out) {
  nlohmann::json modes = nlohmann::json::array();
  auto row = [](const ModeResult& r) {
    return nlohmann::json{{"injected", r.injected},
                          {"caught", {{"1", r.caught[1]}, {"2", r.caught[2]}, {"3", r.caught[3]}}},
                          {"unexercised", r.unexercised},
                          {"escaped", r.escaped},
                          {"lost", r.lost},
                          {"harness_failed", r.harness_failed}};
  };
  for (const auto& [mode, r] : v.modes) {
    auto j = row(r);
    j["mode"] = FaultModeName(mode);
    j["expected_layer"] = ExpectedLayer(mode);
    modes.push_back(j);
  }
  nlohmann::json disabled = nlohmann::json::array();
  for (int l : options.disabled_layers) disabled.push_back(l);
  nlohmann::json doc{{"seed", options.seed},
                     {"ops", v.ops},
                     {"store", options.store},
                     {"disabled_layers", disabled},
                     {"seconds", facts.seconds},
                     {"injected", v.injected},
                     {"escaped", v.escaped},
                     {"lost", v.lost},
                     {"harness_failed", v.harness_failed},
                     {"modes", modes},
                     {"collateral", row(v.plain)},
                     {"kills", {{"gateway", facts.gateway_kills},
                                {"consumer", facts.consumer_kills},
                                {"relay", facts.relay_crashes},
                                {"nats", facts.nats_restarts},
                                {"postgres", facts.postgres_restarts},
                                {"redis", facts.redis_restarts}}},
                     {"consumer_replays", facts.consumer_replays},
                     {"skipped", facts.skipped},
                     {"fenced_completions", facts.fenced_completions},
                     {"problems", facts.problems},
                     {"harness_errors", facts.harness_errors},
                     {"harness_connections_replaced", facts.nats_admin_replaced}};
  out << doc.dump(2) << "\n";
}

}  // namespace idem::chaos
