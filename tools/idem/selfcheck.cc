#include "selfcheck.h"

#include <atomic>
#include <iostream>
#include <memory>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "idem/fingerprint.h"
#include "idem/store.h"
#include "idem/version.h"

namespace idem::cli {
namespace {

class Checker {
 public:
  explicit Checker(std::ostream& out) : out_(out) {}

  void Step(std::string_view what, bool ok, const std::string& detail) {
    out_ << (ok ? "  ok    " : "  FAIL  ") << what << " -> " << detail << "\n";
    if (!ok) ++failures_;
  }
  int failures() const { return failures_; }

 private:
  std::ostream& out_;
  int failures_ = 0;
};

std::string Describe(const Result<BeginOutcome>& r) {
  if (!r.ok()) return r.status().ToString();
  std::string s(OutcomeName(*r));
  if (auto token = OwnedToken(*r)) s += " (token " + std::to_string(*token) + ")";
  if (auto* replay = std::get_if<Replay>(&*r)) {
    s += " (status " + std::to_string(replay->response.status) + ", body " +
         replay->response.body + ")";
  }
  if (auto* in_flight = std::get_if<InFlight>(&*r)) {
    s += " (retry after " + std::to_string(in_flight->retry_after.count()) + " ms)";
  }
  return s;
}

Fingerprint FingerprintOf(std::string_view body) {
  FingerprintPolicy policy;
  RequestParts parts{"POST", "/v1/payments", "", body, {}};
  auto fp = ComputeFingerprint(policy, parts);
  return fp.ok() ? *fp : Fingerprint();
}

// The self-check's steps, in order, on one store; each reports through `check`.
struct SelfCheck {
  SelfCheck(Store& store, ManualClock& clock, std::ostream& out)
      : store(store), clock(clock), check(out) {}

  // A new key in flight, completed, replayed; another body refused; another tenant apart.
  void CheckLifecycle() {
    auto first = store.Begin(scope, fp, lease);
    check.Step("begin a new key", first.ok() && std::holds_alternative<Acquired>(*first),
               Describe(first));
    const FencingToken token = first.ok() ? OwnedToken(*first).value_or(0) : 0;

    auto dup = store.Begin(scope, fp, lease);
    check.Step("the same request while in flight",
               dup.ok() && std::holds_alternative<InFlight>(*dup), Describe(dup));

    auto completed = store.Complete(scope, token, response, ttl);
    check.Step("complete with the owner's token",
               completed.ok() && *completed == CompleteOutcome::kOk,
               completed.ok() ? std::string(CompleteOutcomeName(*completed))
                              : completed.status().ToString());

    auto replay = store.Begin(scope, fp, lease);
    check.Step("retry after completion",
               replay.ok() && std::holds_alternative<Replay>(*replay) &&
                   std::get<Replay>(*replay).response == response,
               Describe(replay));

    auto mismatch = store.Begin(scope, other_fp, lease);
    check.Step("the same key with another body",
               mismatch.ok() && std::holds_alternative<Mismatch>(*mismatch), Describe(mismatch));

    auto tenant = store.Begin(other_tenant, fp, lease);
    check.Step("the same key under another tenant",
               tenant.ok() && std::holds_alternative<Acquired>(*tenant), Describe(tenant));
  }

  // A hung owner: its lease runs out, a retry takes over, the zombie's completion is fenced.
  void CheckTakeover() {
    auto zombie = store.Begin(hung, fp, lease);
    clock.Advance(lease + Duration(1));
    auto takeover = store.Begin(hung, fp, lease);
    check.Step("a retry after the owner's lease ran out",
               takeover.ok() && std::holds_alternative<TakenOver>(*takeover), Describe(takeover));
    const FencingToken zombie_token = zombie.ok() ? OwnedToken(*zombie).value_or(0) : 0;
    auto fenced = store.Complete(hung, zombie_token, response, ttl);
    check.Step("the old owner completes late", fenced.ok() && *fenced == CompleteOutcome::kFenced,
               fenced.ok() ? std::string(CompleteOutcomeName(*fenced))
                           : fenced.status().ToString());
  }

  // Concurrent duplicates: exactly one of many racing threads may acquire.
  void CheckRace() {
    std::atomic<int> acquired{0}, in_flight{0}, other{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 16; ++i) {
      threads.emplace_back([&] {
        auto r = store.Begin(raced, fp, lease);
        if (r.ok() && std::holds_alternative<Acquired>(*r)) {
          ++acquired;
        } else if (r.ok() && std::holds_alternative<InFlight>(*r)) {
          ++in_flight;
        } else {
          ++other;
        }
      });
    }
    for (auto& t : threads) t.join();
    check.Step("16 threads begin one key at once", acquired == 1 && in_flight == 15,
               std::to_string(acquired.load()) + " acquired, " + std::to_string(in_flight.load()) +
                   " in flight, " + std::to_string(other.load()) + " other");
  }

  // An operator's purge, then retention: the completed record expires and the sweep removes it.
  void CheckRetention() {
    auto purged = store.Purge(hung);
    check.Step("purge a record", purged.ok() && *purged,
               purged.ok() ? (*purged ? "removed" : "nothing to remove")
                           : purged.status().ToString());
    for (const Scope* s : {&other_tenant, &raced}) (void)store.Purge(*s);
    clock.Advance(ttl);
    auto expired = store.Get(scope);
    check.Step("the completed record after its 24 h retention", expired.ok() && !*expired,
               expired.ok() ? (*expired ? "still there" : "expired")
                            : expired.status().ToString());
    // Two days on: a store that retains by whole days (PostgreSQL drops a partition once its
    // last UTC day has passed) has then removed the record too.
    auto swept = store.Sweep(clock.Now() + std::chrono::hours(48));
    check.Step("sweep two days later", swept.ok() && *swept >= 1,
               swept.ok() ? std::to_string(*swept) + " expired record(s) removed"
                          : swept.status().ToString());
  }

  Store& store;
  ManualClock& clock;
  Checker check;
  // A fresh key per run, so the check runs the same way against a store that already has data.
  const std::string key = "selfcheck-" + std::to_string(std::mt19937_64(std::random_device{}())());
  const Scope scope{"selfcheck-tenant", "", key};
  const Scope other_tenant{"another-tenant", "", key};
  const Scope hung{"selfcheck-tenant", "", key + "-hung"};
  const Scope raced{"selfcheck-tenant", "", key + "-race"};
  const Fingerprint fp = FingerprintOf(R"({"amount":250})");
  const Fingerprint other_fp = FingerprintOf(R"({"amount":9000})");
  const Duration lease = std::chrono::seconds(30);
  const Duration ttl = std::chrono::hours(24);
  const StoredResponse response{201, {{"Content-Type", "application/json"}}, R"({"id":"pay_1"})"};
};

}  // namespace

int RunSelfCheck(const std::string& store_url, const std::string& durable_store,
                 std::ostream& out) {
  auto clock = std::make_shared<ManualClock>(
      std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()));
  StoreOptions options;
  options.clock = clock;
  options.durable_store = durable_store;
  auto opened = OpenStore(store_url, options);
  if (!opened.ok()) {
    out << "idem selfcheck: cannot open store: " << opened.status().ToString() << "\n";
    return 2;
  }
  Store& store = **opened;
  out << "idem " << kVersion << " self-check on " << store.Describe() << "\n";

  SelfCheck run(store, *clock, out);
  run.CheckLifecycle();
  run.CheckTakeover();
  run.CheckRace();
  run.CheckRetention();

  if (run.check.failures() == 0) {
    out << "self-check passed\n";
    return 0;
  }
  out << "self-check FAILED: " << run.check.failures() << " step(s) misbehaved\n";
  return 1;
}

std::function<int()> AddSelfCheckCommand(CLI::App& app) {
  struct Flags {
    std::string store_url = "sqlite:idem-selfcheck.db";
    std::string durable_store;
  };
  auto flags = std::make_shared<Flags>();
  auto* selfcheck = app.add_subcommand(
      "selfcheck",
      "Drive a store through every record transition (acquire, in flight, complete, replay,\n"
      "mismatch, tenant isolation, lease takeover with fencing, a 16-thread race, sweep) and\n"
      "report each step. Exit code 0 when all behave, 1 when one does not, 2 when the store\n"
      "cannot be opened.");
  selfcheck->add_option("--store", flags->store_url,
                        "Store URL: 'memory', 'sqlite:PATH[?durability=off|normal|full]',\n"
                        "'redis://HOST:PORT[?options]' or\n"
                        "'postgresql://USER[:PASS]@HOST:PORT/DB[?options]'")
      ->capture_default_str();
  selfcheck->add_option("--durable-store", flags->durable_store,
                        "With a redis:// --store: check the tiered store, with this\n"
                        "'postgresql://...' database behind Redis (docs/stores.md)");
  return [flags] { return RunSelfCheck(flags->store_url, flags->durable_store, std::cout); };
}

}  // namespace idem::cli
