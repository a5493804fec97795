#include "chaos/oracle.h"

#include <libpq-fe.h>

#include <algorithm>
#include <set>
#include <utility>

namespace idem::chaos {
namespace {

// Runs `sql` (no parameters) and calls `row` for each result row. False and `error` set on failure.
template <typename F>
bool ForEachRow(PGconn* conn, const char* sql, std::string* error, F row) {
  PGresult* r = PQexec(conn, sql);
  if (PQresultStatus(r) != PGRES_TUPLES_OK) {
    *error = std::string("reading the end state: ") + PQerrorMessage(conn);
    PQclear(r);
    return false;
  }
  for (int i = 0; i < PQntuples(r); ++i) row(r, i);
  PQclear(r);
  return true;
}

int IntAt(PGresult* r, int row, int col) { return std::atoi(PQgetvalue(r, row, col)); }

enum class Outcome { kLost, kEscaped, kCaught1, kCaught2, kCaught3, kUnexercised };

// Which layer stopped the duplicate `mode` makes, judged from the evidence of an operation
// whose effect is exactly once.
Outcome Attribute(FaultMode mode, const Evidence& ev) {
  switch (mode) {
    case FaultMode::kConsumerKill:
    case FaultMode::kConsumerReplay:
    case FaultMode::kRedeliveryStorm:
      return ev.rejected > 0 ? Outcome::kCaught2 : Outcome::kUnexercised;
    case FaultMode::kRelayKill:
    case FaultMode::kRelayOutage:
      if (ev.stream_deduped > 0) return Outcome::kCaught3;
      // Layer 2 caught a republished copy only if the stream stored the event again (under a
      // second sequence) and the inbox refused one. A refusal alone is not enough: `republished`
      // counts claims, and a row claimed twice may have been published once (the first claim
      // released or expired after a failed publish, during a nats_restart say), while the
      // refusal came from a redelivery of that one copy (a consumer killed with it in flight,
      // an ack lost in a nats_restart). Counting that as layer 2 was a mixed-run flake:
      // relay_kill showed layer 2 catches the relay had nothing to do with.
      return ev.stored_again > 0 && ev.rejected > 0 ? Outcome::kCaught2 : Outcome::kUnexercised;
    case FaultMode::kNatsRestart:
    case FaultMode::kNatsLeaderKill:
    case FaultMode::kPostgresRestart:
      // A restart makes duplicates only by accident (a PubAck, an ack or a reply lost with the
      // connection); the evidence of the operation's own event says which layer dropped one.
      if (ev.stream_deduped > 0) return Outcome::kCaught3;
      return ev.rejected > 0 ? Outcome::kCaught2 : Outcome::kUnexercised;
    case FaultMode::kRedisRestart:
      // Caught by layer 1 when a retry was answered from a record (the gateway's, found again
      // in Redis after the restart, or the service's own); unexercised when the first attempt
      // never reached the service.
      if (ev.gateway_replayed || ev.service_replays > 0) return Outcome::kCaught1;
      if (ev.stream_deduped > 0) return Outcome::kCaught3;
      return ev.rejected > 0 ? Outcome::kCaught2 : Outcome::kUnexercised;
    case FaultMode::kZombie:
      // Caught when the retry took the key over (a second fencing token reached the service)
      // and the hung attempt's write still did not become a second charge.
      if (ev.fencing_tokens < 2) return Outcome::kUnexercised;
      return ev.charges == 1 ? Outcome::kCaught1 : Outcome::kEscaped;
    default:
      // A client-side duplicate: the service ran once, so layer 1 (the gateway, or the key
      // recorded in the service's transaction) stopped the copies.
      if (ev.charges == 1) return Outcome::kCaught1;
      return ev.rejected > 0 ? Outcome::kCaught2 : Outcome::kCaught3;
  }
}

void Count(ModeResult& row, Outcome outcome) {
  switch (outcome) {
    case Outcome::kLost: ++row.lost; break;
    case Outcome::kEscaped: ++row.escaped; break;
    case Outcome::kCaught1: ++row.caught[1]; break;
    case Outcome::kCaught2: ++row.caught[2]; break;
    case Outcome::kCaught3: ++row.caught[3]; break;
    case Outcome::kUnexercised: ++row.unexercised; break;
  }
}

}  // namespace

std::vector<Operation> MakePlan(const ChaosOptions& options) {
  std::mt19937_64 rng(options.seed);
  std::vector<FaultMode> modes = options.faults;
  if (modes.empty()) modes.assign(std::begin(kAllFaultModes), std::end(kAllFaultModes));
  std::uniform_int_distribution<int64_t> amount(1, 100000);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::uniform_int_distribution<size_t> pick(0, modes.size() - 1);
  std::vector<Operation> plan;
  plan.reserve(options.ops);
  for (int i = 0; i < options.ops; ++i) {
    Operation op;
    op.id = "op-" + std::to_string(options.seed) + "-" + std::to_string(i);
    op.amount = amount(rng);
    if (coin(rng) < options.fault_rate) op.fault = modes[pick(rng)];
    plan.push_back(std::move(op));
  }
  // Every mode at least once when there is room, so a short run still covers them all.
  for (size_t m = 0; m < modes.size() && m * 7 + 3 < plan.size(); ++m) {
    plan[m * 7 + 3].fault = modes[m];
  }
  return plan;
}

std::map<std::string, Evidence> ReadEvidence(PGconn* conn, std::string* error) {
  std::map<std::string, Evidence> ev;
  const bool ok =
      ForEachRow(conn, "SELECT op, count(*) FROM chaos_charges GROUP BY op", error,
                 [&](PGresult* r, int i) { ev[PQgetvalue(r, i, 0)].charges = IntAt(r, i, 1); }) &&
      ForEachRow(conn, "SELECT op, amount FROM chaos_applied", error,
                 [&](PGresult* r, int i) {
                   Evidence& e = ev[PQgetvalue(r, i, 0)];
                   ++e.applied;
                   e.applied_amounts.push_back(std::atoll(PQgetvalue(r, i, 1)));
                 }) &&
      ForEachRow(conn, "SELECT op, count(*) FROM chaos_rejects GROUP BY op", error,
                 [&](PGresult* r, int i) { ev[PQgetvalue(r, i, 0)].rejected = IntAt(r, i, 1); }) &&
      ForEachRow(conn,
                 "SELECT op, count(*) FROM (SELECT op, event_id FROM "
                 "  (SELECT op, event_id, seq FROM chaos_applied UNION ALL "
                 "   SELECT op, event_id, seq FROM chaos_rejects) d "
                 "  WHERE seq > 0 GROUP BY op, event_id HAVING count(DISTINCT seq) > 1) x "
                 "GROUP BY op",
                 error,
                 [&](PGresult* r, int i) {
                   ev[PQgetvalue(r, i, 0)].stored_again = IntAt(r, i, 1);
                 }) &&
      ForEachRow(conn,
                 "SELECT c.op, count(*) FROM chaos_outage_events e "
                 "JOIN chaos_charges c ON e.event_id = 'charge-' || c.id GROUP BY c.op",
                 error,
                 [&](PGresult* r, int i) { ev[PQgetvalue(r, i, 0)].outage_hit = IntAt(r, i, 1); }) &&
      ForEachRow(conn, "SELECT op, count(*) FROM chaos_replays GROUP BY op", error,
                 [&](PGresult* r, int i) {
                   ev[PQgetvalue(r, i, 0)].service_replays = IntAt(r, i, 1);
                 }) &&
      ForEachRow(conn, "SELECT op, count(DISTINCT token) FROM chaos_attempts GROUP BY op", error,
                 [&](PGresult* r, int i) {
                   ev[PQgetvalue(r, i, 0)].fencing_tokens = IntAt(r, i, 1);
                 }) &&
      ForEachRow(conn,
                 "SELECT c.op, count(*) FILTER (WHERE o.attempts > 1), "
                 "count(*) FILTER (WHERE o.attempts > 1 AND o.duplicate) "
                 "FROM idem.outbox o JOIN chaos_charges c ON o.event_id = 'charge-' || c.id "
                 "GROUP BY c.op",
                 error, [&](PGresult* r, int i) {
                   Evidence& e = ev[PQgetvalue(r, i, 0)];
                   e.republished = IntAt(r, i, 1);
                   e.stream_deduped = IntAt(r, i, 2);
                 });
  if (!ok) ev.clear();
  return ev;
}

// The bad outcome `mode` itself is responsible for, if any: a client-side fault escaped when
// the service executed the payment more than once (or with another amount); a fault between
// the service and the consumer escaped when the event was applied more often than it was
// produced. Lost is lost for every mode.
std::optional<Outcome> OwnBadOutcome(FaultMode mode, const Operation& op, const Evidence& ev) {
  if (ev.applied == 0) return Outcome::kLost;
  const bool wrong_amount = std::any_of(ev.applied_amounts.begin(), ev.applied_amounts.end(),
                                        [&](int64_t a) { return a != op.amount; });
  if (ExpectedLayer(mode) == 0) {
    if (ev.charges > 1 || ev.applied > 1 || wrong_amount) return Outcome::kEscaped;
  } else if (ExpectedLayer(mode) == 1) {
    if (ev.charges > 1 || wrong_amount) return Outcome::kEscaped;
  } else if (ev.applied > std::max(ev.charges, 1)) {
    return Outcome::kEscaped;
  }
  return std::nullopt;
}

Verdict Judge(const std::vector<Operation>& plan, const std::map<std::string, Evidence>& evidence,
              const std::vector<FaultMode>& modes_run,
              const std::vector<HarnessFailure>& harness_failures) {
  Verdict v;
  v.ops = static_cast<int>(plan.size());
  std::set<std::pair<std::string, FaultMode>> not_injected;
  for (const HarnessFailure& f : harness_failures) {
    if (!not_injected.emplace(f.op, f.mode).second) continue;
    ++v.modes[f.mode].harness_failed;
    ++v.harness_failed;
  }
  const bool relay_kills =
      std::find(modes_run.begin(), modes_run.end(), FaultMode::kRelayKill) != modes_run.end();
  const bool outages =
      std::find(modes_run.begin(), modes_run.end(), FaultMode::kRelayOutage) != modes_run.end();
  const Evidence none;
  for (const Operation& op : plan) {
    auto it = evidence.find(op.id);
    const Evidence& ev = it == evidence.end() ? none : it->second;
    const bool wrong_amount = std::any_of(ev.applied_amounts.begin(), ev.applied_amounts.end(),
                                          [&](int64_t a) { return a != op.amount; });
    std::optional<Outcome> bad;
    if (ev.applied == 0) bad = Outcome::kLost;
    else if (ev.applied > 1 || wrong_amount) bad = Outcome::kEscaped;
    if (bad == Outcome::kLost) ++v.lost;
    if (bad == Outcome::kEscaped) ++v.escaped;

    bool explained = false;  // the bad outcome is counted in the row of a fault that caused it
    auto judge = [&](FaultMode mode) {
      ModeResult& row = v.modes[mode];
      const auto own = OwnBadOutcome(mode, op, ev);
      explained = explained || own.has_value();
      const Outcome outcome = own ? *own : Attribute(mode, ev);
      // A fault the harness failed to inject that left no trace was not injected at all: it is
      // in harness_failed, not passed off as injected and unexercised.
      if (outcome == Outcome::kUnexercised && not_injected.count({op.id, mode})) return;
      ++row.injected;
      ++v.injected;
      Count(row, outcome);
    };
    if (op.fault && *op.fault != FaultMode::kRelayKill && *op.fault != FaultMode::kRelayOutage) {
      judge(*op.fault);
    }
    // A relay kill hits whatever the killed relay had published: every republished event; an
    // outage every event its crashed relay had left unmarked (recorded during the outage).
    if (outages && ev.outage_hit > 0) {
      judge(FaultMode::kRelayOutage);
    } else if (relay_kills && ev.republished > 0) {
      judge(FaultMode::kRelayKill);
    }
    // Hit by a fault aimed at another operation (a consumer killed with this one in flight).
    if (bad && !explained) Count(v.plain, *bad);
  }
  for (FaultMode m : modes_run) v.modes[m];  // a row for every mode run, even if empty
  return v;
}

}  // namespace idem::chaos
