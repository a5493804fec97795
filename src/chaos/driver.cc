#include "chaos/driver.h"

#include <nlohmann/json.hpp>

#include <thread>

#include "servers/http_client.h"

namespace idem::chaos {

using namespace std::chrono_literals;

namespace {
std::string RelayDidNotCrash(const Pipeline& pipeline) {
  return "the relay armed to crash after its next published batch did not crash within " +
         std::to_string(pipeline.relay_crash_within().count()) + " s";
}
}  // namespace

Driver::Driver(const std::vector<Operation>& plan, Pipeline& pipeline, const ChaosOptions& options)
    : plan_(plan), pipeline_(pipeline), options_(options) {}

Driver::Answer Driver::Send(const Operation& op, int64_t amount, std::chrono::milliseconds timeout) {
  const std::string body = nlohmann::json{{"op", op.id}, {"amount", amount}}.dump();
  const auto r = servers::Http(pipeline_.entry_address(), "POST", "/charge",
                               {{"Idempotency-Key", op.id}, {"Content-Type", "application/json"}},
                               body, timeout);
  if (r.status != 0 && r.Header("Idempotent-Replayed") == "true") {
    MutexLock lock(mu_);
    replayed_.insert(op.id);
  }
  return {r.status, r.status == 0 ? r.error : r.body};
}

Driver::Answer Driver::SendUntilDone(const Operation& op, int64_t amount) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  Answer a;
  while (std::chrono::steady_clock::now() < deadline) {
    a = Send(op, amount, 5s);
    const bool retry = a.status == 0 || a.status == 409 || a.status >= 500;
    if (!retry) return a;
    std::this_thread::sleep_for(20ms);
  }
  return a;
}

void Driver::Problem(std::string what) {
  MutexLock lock(mu_);
  if (problems_.size() < 100) problems_.push_back(std::move(what));
}

void Driver::HarnessFailed(const Operation& op, std::string why) {
  MutexLock lock(mu_);
  harness_failures_.push_back({op.id, *op.fault, std::move(why)});
}

void Driver::ExpectSuccess(const Operation& op, const Answer& a, const char* step) {
  if (a.status < 200 || a.status > 299) {
    Problem(op.id + " (" + step + "): " + std::to_string(a.status) + " " + a.body.substr(0, 200));
  }
}

void Driver::RunOne(const Operation& op, std::mt19937_64& rng) {
  if (!op.fault) {
    ExpectSuccess(op, SendUntilDone(op, op.amount), "send");
    return;
  }
  switch (*op.fault) {
    case FaultMode::kRetrySoon:
      ExpectSuccess(op, SendUntilDone(op, op.amount), "send");
      ExpectSuccess(op, SendUntilDone(op, op.amount), "retry");
      break;
    case FaultMode::kRetryLater:
    case FaultMode::kRetryHours:
    case FaultMode::kRetryExpired: {
      ExpectSuccess(op, SendUntilDone(op, op.amount), "send");
      MutexLock lock(mu_);
      later_.push_back(&op);
      break;
    }
    case FaultMode::kConcurrent:
      RunConcurrent(op);
      break;
    case FaultMode::kOtherBody:
      ExpectSuccess(op, SendUntilDone(op, op.amount), "send");
      // The same key with another amount: layer 1 must refuse it (422) and apply nothing.
      SendUntilDone(op, op.amount + 1);
      break;
    case FaultMode::kGatewayKill:
      RunGatewayKill(op, rng);
      break;
    case FaultMode::kRelayKill: {
      std::lock_guard lock(relay_mu_);
      const int before = pipeline_.ArmRelayCrash();
      ExpectSuccess(op, SendUntilDone(op, op.amount), "send");
      if (!pipeline_.WaitForRelayCrash(before)) HarnessFailed(op, RelayDidNotCrash(pipeline_));
      break;
    }
    case FaultMode::kRelayOutage:
      RunRelayOutage(op);
      break;
    case FaultMode::kZombie:
      RunZombie(op);
      break;
    case FaultMode::kNatsRestart:
    case FaultMode::kPostgresRestart:
    case FaultMode::kNatsLeaderKill:
      RunServerRestart(op);
      break;
    case FaultMode::kRedisRestart:
      RunRedisRestart(op, rng);
      break;
    case FaultMode::kConsumerReplay:
      // Once the event was applied, a consumer re-reads the stream from its sequence.
      ExpectSuccess(op, SendUntilDone(op, op.amount), "send");
      if (!pipeline_.ReplayFrom(op.id)) HarnessFailed(op, pipeline_.error());
      break;
    case FaultMode::kConsumerKill:
    case FaultMode::kRedeliveryStorm:
      // Injected by the services when the event is delivered.
      ExpectSuccess(op, SendUntilDone(op, op.amount), "send");
      break;
  }
}

void Driver::RunConcurrent(const Operation& op) {
  std::vector<std::thread> copies;
  std::vector<Answer> answers(3);
  for (int i = 0; i < 3; ++i) {
    copies.emplace_back([&, i] { answers[i] = SendUntilDone(op, op.amount); });
  }
  for (auto& t : copies) t.join();
  for (const Answer& a : answers) ExpectSuccess(op, a, "concurrent copy");
}

void Driver::RunGatewayKill(const Operation& op, std::mt19937_64& rng) {
  std::lock_guard lock(gateway_mu_);
  std::thread first([&] { Send(op, op.amount, 3s); });
  std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
  if (!pipeline_.KillAndRestartGateway()) {
    HarnessFailed(op, "the gateway was not killed and restarted: " + pipeline_.error());
  }
  first.join();
  ExpectSuccess(op, SendUntilDone(op, op.amount), "retry after gateway kill");
}

void Driver::RunRelayOutage(const Operation& op) {
  // The relay is stopped while the operation is sent, so its event is in the next batch; a
  // relay armed to crash after publishing that batch is started, and no other until the
  // outage is over: the stream's window is cut to kOutageWindow and the relay stays down
  // kOutageDown, so the broker forgets the batch's ids. Then a relay republishes it and the
  // window is set back. relay_mu_ keeps relay_kill out meanwhile.
  std::lock_guard lock(relay_mu_);
  pipeline_.HoldRelay();
  ExpectSuccess(op, SendUntilDone(op, op.amount), "send");
  const int before = pipeline_.ArmRelayCrash(/*hold_after_crash=*/true);
  const bool crashed = pipeline_.WaitForRelayCrash(before);
  if (!crashed) HarnessFailed(op, RelayDidNotCrash(pipeline_));
  if (crashed && !pipeline_.RecordOutageBatch()) HarnessFailed(op, pipeline_.error());
  const bool shortened = crashed && pipeline_.SetDuplicateWindow(kOutageWindow);
  if (crashed && !shortened) HarnessFailed(op, pipeline_.error());
  std::this_thread::sleep_for(kOutageDown);
  pipeline_.ReleaseRelay();
  if (crashed && !pipeline_.WaitForOutageRepublished()) HarnessFailed(op, pipeline_.error());
  if (shortened && !pipeline_.SetDuplicateWindow(pipeline_.duplicate_window())) {
    HarnessFailed(op, "setting the stream's window back: " + pipeline_.error());
  }
}

void Driver::RunZombie(const Operation& op) {
  // The first attempt hangs in the service (kZombieHang); the client gives up on it after
  // the lease and retries, which takes the key over. The hung attempt finishes later.
  std::thread first([&] { Send(op, op.amount, 5s); });
  std::this_thread::sleep_for(1100ms);
  ExpectSuccess(op, SendUntilDone(op, op.amount), "retry after the lease");
  first.join();
}

void Driver::RunServerRestart(const Operation& op) {
  // Right after the success, while the operation's event is on its way (and the other
  // clients keep sending): the server dies and comes back. nats_leader_kill, on a cluster:
  // the node leading the R3 stream dies; another takes over and the killed one comes back.
  std::lock_guard lock(server_mu_);
  ExpectSuccess(op, SendUntilDone(op, op.amount), "send");
  bool done = false;
  switch (*op.fault) {
    case FaultMode::kNatsRestart:
      done = pipeline_.RestartNats();
      break;
    case FaultMode::kPostgresRestart:
      done = pipeline_.RestartPostgres();
      break;
    default:  // kNatsLeaderKill
      done = pipeline_.KillStreamLeader();
      break;
  }
  if (!done) HarnessFailed(op, pipeline_.error());
}

void Driver::RunRedisRestart(const Operation& op, std::mt19937_64& rng) {
  // The request is sent, and 0-3 ms later the gateway's Redis dies: the gateway answers
  // 503 while it is down (the client retries with the same key) and finds the record
  // again once it is back (append-only file, fsync always). On the tiered store Redis
  // comes back empty, and the gateway serves from PostgreSQL meanwhile and finds the
  // completed records there. Other clients hit it too.
  std::lock_guard lock(server_mu_);
  std::thread first([&] { Send(op, op.amount, 3s); });
  std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
  if (!pipeline_.KillRedis()) HarnessFailed(op, "no Redis to kill");
  std::this_thread::sleep_for(kRedisDown);
  if (!pipeline_.RestartRedis()) HarnessFailed(op, pipeline_.error());
  first.join();
  ExpectSuccess(op, SendUntilDone(op, op.amount), "retry after the Redis restart");
}

void Driver::Run() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options_.duration_seconds);
  const bool timed = options_.duration_seconds > 0;
  std::vector<std::thread> clients;
  for (int c = 0; c < std::max(1, options_.clients); ++c) {
    clients.emplace_back([this, c, deadline, timed] {
      std::mt19937_64 rng(options_.seed * 1000003 + c);
      // With a duration, an operation is claimed only while there is time left: the operations
      // sent are then exactly the first sent() of the plan.
      while ((!timed || std::chrono::steady_clock::now() < deadline) && !pipeline_.broken()) {
        const size_t i = next_++;
        if (i >= plan_.size()) break;
        RunOne(plan_[i], rng);
        ++done_;
      }
    });
  }
  for (auto& t : clients) t.join();
  if (pipeline_.broken()) return;
  // "Much later": after every other operation and fault of the run. retry_later's retries
  // first, on the real clock; then the gateway's and the service's clocks jump kHoursLater
  // ahead for retry_hours' (within retention: replayed), then kPastRetention for
  // retry_expired's (every record expired: executed again, by design).
  std::vector<const Operation*> later;
  {
    MutexLock lock(mu_);
    later.swap(later_);
  }
  for (auto [mode, offset] : {std::pair<FaultMode, Duration>{FaultMode::kRetryLater, Duration(0)},
                              {FaultMode::kRetryHours, kHoursLater},
                              {FaultMode::kRetryExpired, kPastRetention}}) {
    bool moved = offset == Duration(0);
    std::string clock_error;  // each retry sent on the unmoved clock is a fault not injected
    for (const Operation* op : later) {
      if (op->fault != mode) continue;
      if (!moved) {
        moved = true;
        if (!pipeline_.SetClockOffset(offset)) clock_error = "moving the clock: " + pipeline_.error();
      }
      if (!clock_error.empty()) HarnessFailed(*op, clock_error);
      const Answer a = SendUntilDone(*op, op->amount);
      if (a.status < 200 || a.status > 299) {
        Problem(op->id + " (late retry): " + std::to_string(a.status) + " " +
                a.body.substr(0, 200));
      }
    }
  }
}

std::set<std::string> Driver::gateway_replays() const {
  MutexLock lock(mu_);
  return replayed_;
}

std::vector<HarnessFailure> Driver::harness_failures() const {
  MutexLock lock(mu_);
  return harness_failures_;
}

std::vector<std::string> Driver::problems() const {
  MutexLock lock(mu_);
  return problems_;
}

}  // namespace idem::chaos
