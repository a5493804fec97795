// The client side of `idem chaos`: sends every operation of the plan as a payment
// (POST /charge with its Idempotency-Key), retrying until it gets a success, and injects each
// operation's client-side or process fault around it (docs/chaos.md lists how each is done).
// Faults injected inside the services (consumer kill, redelivery storm) only need the plan.
//
// Thread safety: Run from one thread; done() from any.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <mutex>
#include <string>
#include <vector>

#include "chaos/chaos_options.h"
#include "chaos/oracle.h"
#include "chaos/pipeline.h"
#include "core/mutex.h"

namespace idem::chaos {

// How long redis_restart keeps the gateway's Redis down before starting it again.
inline constexpr std::chrono::milliseconds kRedisDown{300};

class Driver {
 public:
  // `plan` and `pipeline` must outlive the driver.
  Driver(const std::vector<Operation>& plan, Pipeline& pipeline, const ChaosOptions& options);

  // Sends the operations of the plan in order with options.clients threads (all of them, or
  // with options.duration_seconds as many as start before the time is up), then the late
  // retries.
  void Run();

  int done() const { return done_.load(); }
  // How many operations of the plan were sent: the first sent() of it. REQUIRES: Run returned.
  size_t sent() const { return std::min(next_.load(), plan_.size()); }
  // Operations that got no success answer within their deadline, and unexpected answers
  // ("op-1-7: 500 ..."), for the report: what the clients saw.
  std::vector<std::string> problems() const;
  // Planned faults the harness could not inject or finish injecting, each with the reason:
  // errors of the harness itself, kept apart from problems().
  std::vector<HarnessFailure> harness_failures() const;
  // Operations the gateway answered at least once with a stored response
  // (`Idempotent-Replayed: true`): layer 1's evidence on the client side.
  std::set<std::string> gateway_replays() const;

 private:
  struct Answer {
    int status = 0;
    std::string body;
  };
  Answer Send(const Operation& op, int64_t amount, std::chrono::milliseconds timeout);
  // Sends until a 2xx or a final 4xx answer, or 60 s pass.
  Answer SendUntilDone(const Operation& op, int64_t amount);
  // Sends `op` and injects its fault around it.
  void RunOne(const Operation& op, std::mt19937_64& rng);
  // The faults RunOne injects with more than one step, one function each.
  void RunConcurrent(const Operation& op);
  void RunGatewayKill(const Operation& op, std::mt19937_64& rng);
  void RunRelayOutage(const Operation& op);
  void RunZombie(const Operation& op);
  void RunServerRestart(const Operation& op);  // nats_restart, postgres_restart, nats_leader_kill
  void RunRedisRestart(const Operation& op, std::mt19937_64& rng);
  // A Problem unless `a` is a success; `step` says which send of `op` it answered.
  void ExpectSuccess(const Operation& op, const Answer& a, const char* step);
  void Problem(std::string what);
  // Records that the harness could not inject (or finish injecting) `op`'s fault.
  void HarnessFailed(const Operation& op, std::string why);

  const std::vector<Operation>& plan_;
  Pipeline& pipeline_;
  ChaosOptions options_;
  std::atomic<int> done_{0};
  std::atomic<size_t> next_{0};
  std::mutex gateway_mu_;  // one gateway kill at a time
  std::mutex relay_mu_;    // one relay crash at a time
  std::mutex server_mu_;   // one server restart at a time
  mutable Mutex mu_;
  std::vector<const Operation*> later_ IDEM_GUARDED_BY(mu_);  // retry_later, _hours, _expired
  std::vector<std::string> problems_ IDEM_GUARDED_BY(mu_);
  std::vector<HarnessFailure> harness_failures_ IDEM_GUARDED_BY(mu_);
  std::set<std::string> replayed_ IDEM_GUARDED_BY(mu_);
};

}  // namespace idem::chaos
