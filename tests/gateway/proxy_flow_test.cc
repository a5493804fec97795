// The gateway's request flow (HandleProxyRequest) without sockets: a scripted FakeUpstream, the
// memory store behind a FaultStore, and a ManualClock, all on one single-threaded io_context.
// Covers every row of docs/gateway.md's outcome table that the proxy path produces, every store
// call failing in turn (the fail_count idea: fail call N for N = 1, 2, ... until a run sees no
// fault), and lease expiry, takeover and fencing by moving the clock, never by sleeping.
#include <gtest/gtest.h>

#include <future>
#include <memory>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include "gateway/admin.h"
#include "gateway/flow/wait.h"
#include "gateway/problem.h"
#include "gateway/proxy.h"
#include "idem/keys.h"
#include "idem/store.h"
#include "util/fake_upstream.h"
#include "util/fault_store.h"
#include "util/run_io_until.h"

namespace idem::gateway {
namespace {

using namespace std::chrono_literals;
using testing::FakeUpstream;
using Failure = UpstreamResult::Failure;

constexpr Duration kLease = 10s;
constexpr size_t kMaxPending = 2;  // the Flow's max_pending_completions
// Well under flow::kSlowPoll: a waiter woken in time was woken by the settle, not the poll.
constexpr auto kSlowPollForTests = std::chrono::milliseconds(flow::kSlowPoll) / 2;

// One gateway without listeners. Requests run on `io`, one thread (the test's).
class Flow {
 public:
  // `gateway_clock`: the clock the gateway and its store read (default: `clock`).
  explicit Flow(std::shared_ptr<Clock> gateway_clock = nullptr) {
    if (!gateway_clock) gateway_clock = clock;
    options.clock = gateway_clock;
    options.upstream = "http://127.0.0.1:1";
    options.max_stored_response = 64;
    RoutePolicy off;
    off.path_prefix = "/off";
    off.key = KeyRequirement::kOff;
    RoutePolicy optional;
    optional.path_prefix = "/optional";
    optional.key = KeyRequirement::kOptional;
    optional.lease = kLease;
    RoutePolicy open;
    open.path_prefix = "/open";
    open.fail_open = true;
    open.lease = kLease;
    RoutePolicy v7;
    v7.path_prefix = "/v7";
    v7.key_format = KeyFormat::kUuidV7;
    v7.retention = 1h;
    v7.lease = kLease;
    RoutePolicy operation;
    operation.path_prefix = "/operation";
    operation.long_running = true;
    operation.lease = kLease;
    RoutePolicy rest;
    rest.method = "POST";
    rest.path_prefix = "/";
    rest.lease = kLease;
    options.routes = {off, optional, open, v7, operation, rest};

    StoreOptions store_options;
    store_options.clock = gateway_clock;
    auto opened = OpenStore("memory", store_options);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    memory = std::move(*opened);
    faults = std::make_unique<testing::FaultStore>(*memory);
    executor = std::make_unique<StoreExecutor>(*faults, StoreExecutor::Options{1, 4096});
    services =
        std::make_unique<Services>(
            Services{options, *executor, upstream, metrics, log, waiters, pending});
  }

  ~Flow() {
    upstream.Release();
    // The store comes back, so that completions retried until stored end.
    faults->FailFrom(0, Status::Ok());
    faults->FailCompletions(Status::Ok());
    io.run();  // let retries after responses end before the executor goes
  }

  static Request Post(std::string target, std::string key, std::string body = R"({"amount":1})") {
    Request req{http::verb::post, target, 11};
    req.set(http::field::host, "gateway.test");
    req.set(http::field::content_type, "application/json");
    if (!key.empty()) req.set(kKeyHeader, key);
    req.body() = std::move(body);
    req.keep_alive(true);
    req.prepare_payload();
    return req;
  }

  // Starts a request (from `client`, if given); the caller drives `io`.
  std::future<Response> Start(Request request, flow::ClientHangup* client = nullptr) {
    return asio::co_spawn(io, Handle(*services, std::move(request), client), asio::use_future);
  }

  // Runs a request to its end, and every store write retried after its response.
  Response Send(Request request) {
    std::future<Response> response = Start(std::move(request));
    io.run();
    io.restart();
    return response.get();
  }

  // Starts a POST to `target` with `key` whose upstream answer, `step`, is held until
  // upstream.Release(); returns once the request is at the upstream (the key in flight).
  std::future<Response> StartHeld(std::string target, std::string key,
                                  FakeUpstream::Step step = {}) {
    step.hold = true;
    const int held_before = upstream.held();
    upstream.Script(std::move(step));
    std::future<Response> response = Start(Post(std::move(target), std::move(key)));
    EXPECT_TRUE(RunUntil([&] { return upstream.held() == held_before + 1; }));
    return response;
  }

  // Runs the event loop until `done` holds (util/run_io_until.h).
  template <typename Pred>
  bool RunUntil(Pred done) {
    return testing::RunIoUntil(io, done);
  }

  uint64_t count(Outcome outcome) const { return metrics.count(outcome); }

  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  GatewayOptions options;
  FakeUpstream upstream;
  Metrics metrics;
  Log log{false};
  KeyWaiters waiters{16};
  PendingCompletions pending{kMaxPending};
  asio::io_context io;
  std::unique_ptr<Store> memory;
  std::unique_ptr<testing::FaultStore> faults;
  std::unique_ptr<StoreExecutor> executor;  // after the store and io: destroyed before them
  std::unique_ptr<Services> services;

 private:
  static Task<Response> Handle(Services& s, Request request, flow::ClientHangup* client) {
    Response response = co_await HandleProxyRequest(s, request, client);
    co_return std::move(response);
  }
};

bool Ready(const std::future<Response>& f) { return f.wait_for(0s) == std::future_status::ready; }

bool IsProblem(const Response& res, Problem problem) {
  return res.result() == ProblemStatus(problem) &&
         res.body().find(ProblemType(problem)) != std::string::npos;
}

std::string Header(const Response& res, std::string_view name) {
  auto it = res.find(name);
  return it == res.end() ? "(absent)" : std::string(it->value());
}
std::string Header(const Request& req, std::string_view name) {
  auto it = req.find(name);
  return it == req.end() ? "(absent)" : std::string(it->value());
}

uint64_t TokenSent(const Request& req) { return std::stoull(Header(req, kFencingTokenHeader)); }

// ---- Admit -----------------------------------------------------------------------------------

TEST(ProxyFlowTest, PassthroughRouteForwardsWithoutATokenAndStoresNothing) {
  Flow flow;
  Request req = Flow::Post("/off/report", "k-1");
  // A client's own tokens never reach the upstream, whatever their case.
  req.set(kFencingTokenHeader, "999");
  req.insert("idempotency-FENCING-token", "998");
  const Response res = flow.Send(std::move(req));
  EXPECT_EQ(res.result_int(), 201u);
  EXPECT_EQ(res.body(), "created");
  EXPECT_EQ(Header(res, kReplayedHeader), "(absent)");
  ASSERT_EQ(flow.upstream.calls(), 1);
  EXPECT_EQ(Header(flow.upstream.requests()[0], kFencingTokenHeader), "(absent)");
  EXPECT_EQ(Header(flow.upstream.requests()[0], kKeyHeader), "k-1");
  EXPECT_EQ(flow.count(Outcome::kPassthrough), 1u);
  EXPECT_EQ(flow.faults->calls(), 0) << "a passthrough route never touches the store";
  EXPECT_EQ(flow.upstream.last_timeout(), flow.options.upstream_response_timeout);
}

TEST(ProxyFlowTest, OptionalRoutePassesThroughWithoutAKeyAndProtectsWithOne) {
  Flow flow;
  EXPECT_EQ(flow.Send(Flow::Post("/optional/x", "")).result_int(), 201u);
  EXPECT_EQ(flow.count(Outcome::kPassthrough), 1u);
  EXPECT_EQ(flow.Send(Flow::Post("/optional/x", "k-2")).result_int(), 201u);
  const Response replay = flow.Send(Flow::Post("/optional/x", "k-2"));
  EXPECT_EQ(Header(replay, kReplayedHeader), "true");
  EXPECT_EQ(flow.upstream.calls(), 2);
  EXPECT_EQ(flow.count(Outcome::kExecuted), 1u);
  EXPECT_EQ(flow.count(Outcome::kReplayed), 1u);
}

TEST(ProxyFlowTest, MissingAndMalformedKeysAreRefusedBeforeTheStore) {
  Flow flow;
  EXPECT_TRUE(IsProblem(flow.Send(Flow::Post("/pay", "")), Problem::kMissingKey));
  EXPECT_TRUE(IsProblem(flow.Send(Flow::Post("/pay", "\"unterminated")), Problem::kInvalidKey));
  EXPECT_EQ(flow.count(Outcome::kMissingKey), 1u);
  EXPECT_EQ(flow.count(Outcome::kInvalidKey), 1u);
  EXPECT_EQ(flow.upstream.calls(), 0);
  EXPECT_EQ(flow.faults->calls(), 0);
}

TEST(ProxyFlowTest, RetentionGuardReadsTheGatewaysClock) {
  Flow flow;
  EXPECT_TRUE(IsProblem(flow.Send(Flow::Post("/v7/pay", "not-a-uuid")), Problem::kKeyFormat));

  UuidV7Generator now_keys(flow.clock);
  const std::string key = now_keys.Next()->ToString();
  EXPECT_EQ(flow.Send(Flow::Post("/v7/pay", key)).result_int(), 201u);

  UuidV7Generator future_keys(std::make_shared<ManualClock>(flow.clock->Now() + 6min));
  EXPECT_TRUE(IsProblem(flow.Send(Flow::Post("/v7/pay", future_keys.Next()->ToString())),
                        Problem::kKeyInFuture));

  flow.clock->Advance(1h + 1ms);  // the key is now older than the route's retention
  EXPECT_TRUE(IsProblem(flow.Send(Flow::Post("/v7/pay", key)), Problem::kKeyExpired));
  EXPECT_EQ(flow.upstream.calls(), 1);
  EXPECT_EQ(flow.count(Outcome::kInvalidKey), 1u);
  EXPECT_EQ(flow.count(Outcome::kKeyExpired), 2u);
}

// ---- Claim -----------------------------------------------------------------------------------

TEST(ProxyFlowTest, FirstRequestExecutesWithATokenAndRetriesReplay) {
  Flow flow;
  const Response first = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_EQ(first.result_int(), 201u);
  EXPECT_EQ(first.body(), "created");
  EXPECT_EQ(Header(first, kReplayedHeader), "false");
  ASSERT_EQ(flow.upstream.calls(), 1);
  EXPECT_GT(TokenSent(flow.upstream.requests()[0]), 0u);
  EXPECT_EQ(Header(flow.upstream.requests()[0], kKeyHeader), "k-1");

  const Response replay = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_EQ(replay.result_int(), 201u) << "a 201 stays 201";
  EXPECT_EQ(replay.body(), "created");
  EXPECT_EQ(Header(replay, kReplayedHeader), "true");
  EXPECT_EQ(Header(replay, "Content-Type"), "text/plain") << "a stored header is replayed";
  EXPECT_EQ(flow.upstream.calls(), 1);
  EXPECT_EQ(flow.count(Outcome::kExecuted), 1u);
  EXPECT_EQ(flow.count(Outcome::kReplayed), 1u);
}

TEST(ProxyFlowTest, SameKeyOtherRequestIsAMismatch) {
  Flow flow;
  flow.Send(Flow::Post("/pay", "k-1", R"({"amount":1})"));
  EXPECT_TRUE(IsProblem(flow.Send(Flow::Post("/pay", "k-1", R"({"amount":2})")),
                        Problem::kKeyReused));
  EXPECT_EQ(flow.upstream.calls(), 1);
  EXPECT_EQ(flow.count(Outcome::kMismatch), 1u);
}

TEST(ProxyFlowTest, SameKeyWhileInFlightIsAConflictWithTheLeaseLeft) {
  Flow flow;
  FakeUpstream::Step held;
  held.hold = true;
  flow.upstream.Script(held);
  std::future<Response> first = flow.Start(Flow::Post("/pay", "k-1"));
  ASSERT_TRUE(flow.RunUntil([&] { return flow.upstream.held() == 1; }));

  flow.clock->Advance(3500ms);
  std::future<Response> second = flow.Start(Flow::Post("/pay", "k-1"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(second); }));
  const Response conflict = second.get();
  EXPECT_TRUE(IsProblem(conflict, Problem::kKeyInFlight)) << conflict.body();
  EXPECT_EQ(Header(conflict, "Retry-After"), "7") << "6.5 s of the lease left, rounded up";
  EXPECT_FALSE(Ready(first));

  flow.upstream.Release();
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(first); }));
  EXPECT_EQ(first.get().result_int(), 201u);
  EXPECT_EQ(flow.upstream.calls(), 1);
  EXPECT_EQ(flow.count(Outcome::kConflict), 1u);
}

TEST(ProxyFlowTest, AfterTheLeaseARetryTakesOverAndTheLateAttemptIsFenced) {
  Flow flow;
  FakeUpstream::Step slow = FakeUpstream::Answer(201, "first attempt");
  slow.hold = true;
  flow.upstream.Script(slow);
  flow.upstream.Script(FakeUpstream::Answer(201, "second attempt"));
  std::future<Response> first = flow.Start(Flow::Post("/pay", "k-1"));
  ASSERT_TRUE(flow.RunUntil([&] { return flow.upstream.held() == 1; }));

  flow.clock->Advance(kLease + 1ms);  // the first attempt's lease runs out while it hangs
  std::future<Response> second = flow.Start(Flow::Post("/pay", "k-1"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(second); }));
  const Response taken = second.get();
  EXPECT_EQ(taken.result_int(), 201u);
  EXPECT_EQ(taken.body(), "second attempt");
  ASSERT_EQ(flow.upstream.calls(), 2);
  const uint64_t first_token = TokenSent(flow.upstream.requests()[0]);
  const uint64_t second_token = TokenSent(flow.upstream.requests()[1]);
  EXPECT_GT(second_token, first_token) << "the upstream can tell the current attempt";

  flow.upstream.Release();  // the first attempt finishes late: its completion is fenced
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(first); }));
  const Response late = first.get();
  EXPECT_EQ(late.result_int(), 201u);
  EXPECT_EQ(late.body(), "first attempt") << "its own client still gets the upstream's answer";
  EXPECT_EQ(Header(late, kReplayedHeader), "false");

  const Response replay = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_EQ(replay.body(), "second attempt") << "the record keeps the new owner's result";
  EXPECT_EQ(Header(replay, kReplayedHeader), "true");
  EXPECT_EQ(flow.count(Outcome::kExecuted), 2u);
  EXPECT_NE(flow.metrics.Render().find("idem_gateway_takeovers_total 1"), std::string::npos);
  EXPECT_NE(flow.metrics.Render().find("idem_gateway_fenced_completions_total 1"),
            std::string::npos)
      << flow.metrics.Render();
}

// An OffsetClock over a base clock that stands still (--unsafe-clock-offset-file's clock): moving
// only the offset expires the lease and, hours later, the retention, for the gateway and its
// store alike.
TEST(ProxyFlowTest, AClockOffsetMovesLeaseExpiryAndRetention) {
  auto offset = std::make_shared<OffsetClock>(std::make_shared<ManualClock>());
  Flow flow(offset);
  FakeUpstream::Step slow = FakeUpstream::Answer(201, "first attempt");
  slow.hold = true;
  flow.upstream.Script(slow);
  flow.upstream.Script(FakeUpstream::Answer(201, "second attempt"));
  flow.upstream.Script(FakeUpstream::Answer(201, "after retention"));
  std::future<Response> first = flow.Start(Flow::Post("/pay", "k-1"));
  ASSERT_TRUE(flow.RunUntil([&] { return flow.upstream.held() == 1; }));

  offset->SetOffset(kLease - 1ms);  // within the lease: a conflict
  std::future<Response> conflict = flow.Start(Flow::Post("/pay", "k-1"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(conflict); }));
  EXPECT_TRUE(IsProblem(conflict.get(), Problem::kKeyInFlight));
  offset->SetOffset(kLease + 1ms);  // past it: the retry takes the key over
  std::future<Response> second = flow.Start(Flow::Post("/pay", "k-1"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(second); }));
  EXPECT_EQ(second.get().body(), "second attempt");
  flow.upstream.Release();
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(first); }));
  ASSERT_EQ(flow.upstream.calls(), 2);

  // The route keeps a response 24 h (the default retention): 23 h later it is replayed ...
  offset->SetOffset(kLease + 23h);
  const Response hours_later = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_EQ(hours_later.body(), "second attempt");
  EXPECT_EQ(Header(hours_later, kReplayedHeader), "true");
  EXPECT_EQ(flow.upstream.calls(), 2);
  // ... and after it, the key is new again: the request runs once more.
  offset->SetOffset(kLease + 24h + 1s);
  const Response past_retention = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_EQ(past_retention.body(), "after retention");
  EXPECT_EQ(Header(past_retention, kReplayedHeader), "false");
  EXPECT_EQ(flow.upstream.calls(), 3);
}

// ---- Forward and settle ----------------------------------------------------------------------

TEST(ProxyFlowTest, TransientUpstreamAnswersReleaseTheKey) {
  for (unsigned status : {500u, 503u, 408u, 429u}) {
    SCOPED_TRACE(status);
    Flow flow;
    flow.upstream.Script(FakeUpstream::Answer(status, "try later"));
    const Response res = flow.Send(Flow::Post("/pay", "k-1"));
    EXPECT_EQ(res.result_int(), status);
    EXPECT_EQ(res.body(), "try later");
    EXPECT_EQ(Header(res, kReplayedHeader), "(absent)");
    EXPECT_EQ(flow.count(Outcome::kReleased), 1u);
    const Response retry = flow.Send(Flow::Post("/pay", "k-1"));
    EXPECT_EQ(retry.result_int(), 201u) << "released: the retry runs again at once";
    EXPECT_EQ(flow.upstream.calls(), 2);
  }
}

TEST(ProxyFlowTest, TransportFailuresAreProblemsAndReleaseTheKey) {
  struct Case {
    Failure failure;
    Problem problem;
  };
  for (const Case c : {Case{Failure::kConnect, Problem::kUpstreamUnavailable},
                       Case{Failure::kBroken, Problem::kUpstreamUnavailable},
                       Case{Failure::kTimeout, Problem::kUpstreamTimeout}}) {
    SCOPED_TRACE(static_cast<int>(c.failure));
    Flow flow;
    flow.upstream.Script(FakeUpstream::Fail(c.failure));
    const Response res = flow.Send(Flow::Post("/pay", "k-1"));
    EXPECT_TRUE(IsProblem(res, c.problem)) << res.body();
    EXPECT_EQ(flow.count(Outcome::kReleased), 1u);
    EXPECT_EQ(flow.Send(Flow::Post("/pay", "k-1")).result_int(), 201u);
    EXPECT_EQ(flow.upstream.calls(), 2);
  }
}

TEST(ProxyFlowTest, OtherStatusesAreCompletedAndReplayed) {
  for (unsigned status : {200u, 302u, 400u, 404u, 409u, 425u}) {
    SCOPED_TRACE(status);
    Flow flow;
    flow.upstream.Script(FakeUpstream::Answer(status, "final"));
    EXPECT_EQ(flow.Send(Flow::Post("/pay", "k-1")).result_int(), status);
    const Response replay = flow.Send(Flow::Post("/pay", "k-1"));
    EXPECT_EQ(replay.result_int(), status);
    EXPECT_EQ(Header(replay, kReplayedHeader), "true");
    EXPECT_EQ(flow.upstream.calls(), 1);
  }
}

TEST(ProxyFlowTest, ResponseOverTheStoredLimitIsSentOnceAndNeverRunAgain) {
  Flow flow;
  const std::string big(flow.options.max_stored_response + 1, 'x');
  flow.upstream.Script(FakeUpstream::Answer(201, big));
  const Response first = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_EQ(first.body(), big);
  EXPECT_EQ(Header(first, kReplayedHeader), "false");
  const Response retry = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_TRUE(IsProblem(retry, Problem::kResponseNotStored)) << retry.body();
  EXPECT_NE(retry.body().find("status 201"), std::string::npos) << retry.body();
  EXPECT_NE(retry.body().find(std::to_string(big.size()) + " bytes"), std::string::npos);
  EXPECT_EQ(Header(retry, kNotStoredMarker), "(absent)") << "the marker is never sent";
  EXPECT_EQ(flow.upstream.calls(), 1);
  EXPECT_EQ(flow.count(Outcome::kExecuted), 1u);
  EXPECT_EQ(flow.count(Outcome::kReplayed), 1u);
}

TEST(ProxyFlowTest, UpstreamAnswerTooLargeToReadIsCompletedAsNotStored) {
  Flow flow;
  flow.upstream.Script(FakeUpstream::Fail(Failure::kTooLarge));
  const Response first = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_TRUE(IsProblem(first, Problem::kUpstreamTooLarge)) << first.body();
  EXPECT_EQ(Header(first, kReplayedHeader), "false");
  const Response retry = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_TRUE(IsProblem(retry, Problem::kResponseNotStored)) << retry.body();
  EXPECT_EQ(flow.upstream.calls(), 1) << "the upstream acted: never again";
  EXPECT_EQ(flow.count(Outcome::kExecuted), 1u);
  EXPECT_EQ(flow.count(Outcome::kReplayed), 1u);
}

// ---- Store failures --------------------------------------------------------------------------

TEST(ProxyFlowTest, BeginFailingAnswers503WithoutCallingTheUpstream) {
  Flow flow;
  flow.faults->FailFrom(1, UnavailableError("injected"), 1);
  const Response res = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_TRUE(IsProblem(res, Problem::kStoreUnavailable)) << res.body();
  EXPECT_EQ(Header(res, "Retry-After"), "1");
  EXPECT_EQ(flow.upstream.calls(), 0);
  EXPECT_EQ(flow.count(Outcome::kStoreError), 1u);
}

// A store that says "do not retry" (status.h) is a bug or a misconfiguration, not an outage: 500
// internal-error without Retry-After, logged, and the upstream is not called. The same request
// runs once the store is fixed.
TEST(ProxyFlowTest, AStoreThatSaysDoNotRetryIs500WithoutRetryAfter) {
  for (const Status& refusal :
       {FailedPreconditionError("injected: database is read-only"),
        InvalidArgumentError("injected"), NotFoundError("injected"),
        AlreadyExistsError("injected")}) {
    SCOPED_TRACE(refusal.ToString());
    Flow flow;
    flow.faults->FailFrom(1, refusal, 1);
    const Response res = flow.Send(Flow::Post("/pay", "k-1"));
    EXPECT_TRUE(IsProblem(res, Problem::kInternalError)) << res.body();
    EXPECT_EQ(Header(res, "Retry-After"), "(absent)");
    EXPECT_EQ(flow.upstream.calls(), 0);
    EXPECT_EQ(flow.count(Outcome::kStoreError), 1u);
    EXPECT_EQ(flow.Send(Flow::Post("/pay", "k-1")).result_int(), 201u) << "fixed: it runs";
    EXPECT_EQ(flow.upstream.calls(), 1);
  }
}

// A fail_open route forwards when the store is misconfigured, as when it is down; never when
// the store says something exists under the key that it will not overwrite.
TEST(ProxyFlowTest, FailOpenForwardsPastAMisconfiguredStoreButNotPastAnExistingRecord) {
  Flow flow;
  flow.faults->FailFrom(1, FailedPreconditionError("injected: database is read-only"), 1);
  EXPECT_EQ(flow.Send(Flow::Post("/open/pay", "k-1")).result_int(), 201u);
  EXPECT_EQ(flow.upstream.calls(), 1);
  flow.faults->FailFrom(flow.faults->calls() + 1, AlreadyExistsError("injected"), 1);
  const Response refused = flow.Send(Flow::Post("/open/pay", "k-2"));
  EXPECT_TRUE(IsProblem(refused, Problem::kInternalError)) << refused.body();
  EXPECT_EQ(flow.upstream.calls(), 1) << "not forwarded";
  EXPECT_EQ(flow.count(Outcome::kStoreError), 2u);
}

TEST(ProxyFlowTest, CorruptRecordIs500EvenOnAFailOpenRoute) {
  Flow flow;
  flow.faults->FailFrom(1, DataLossError("injected: cannot decode"), 2);
  EXPECT_TRUE(IsProblem(flow.Send(Flow::Post("/pay", "k-1")), Problem::kRecordCorrupt));
  EXPECT_TRUE(IsProblem(flow.Send(Flow::Post("/open/pay", "k-1")), Problem::kRecordCorrupt));
  EXPECT_EQ(flow.upstream.calls(), 0) << "a corrupt record is never bypassed";
  EXPECT_EQ(flow.count(Outcome::kStoreError), 2u);
}

TEST(ProxyFlowTest, FailOpenRouteForwardsUnprotectedWhenTheStoreFails) {
  Flow flow;
  flow.faults->FailFrom(1, UnavailableError("injected"), 1);
  const Response res = flow.Send(Flow::Post("/open/pay", "k-1"));
  EXPECT_EQ(res.result_int(), 201u);
  ASSERT_EQ(flow.upstream.calls(), 1);
  EXPECT_EQ(Header(flow.upstream.requests()[0], kFencingTokenHeader), "(absent)");
  EXPECT_EQ(flow.count(Outcome::kStoreError), 1u);
  EXPECT_EQ(flow.faults->calls(), 1) << "no completion for a request that holds no claim";
}

TEST(ProxyFlowTest, FailedCompletionIsRetriedAfterTheResponse) {
  Flow flow;
  flow.faults->FailFrom(2, UnavailableError("injected"), 1);  // call 2: the Complete
  std::future<Response> first = flow.Start(Flow::Post("/pay", "k-1"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(first); }));
  EXPECT_EQ(first.get().result_int(), 201u) << "the client is not kept waiting";
  EXPECT_EQ(flow.metrics.store_writes_retrying(), 1);

  // Meanwhile the record is still in flight: a retry is told to wait, never run again.
  const Response during = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_EQ(flow.metrics.store_writes_retrying(), 0) << "Send ran the retry to its end";
  EXPECT_TRUE(during.result_int() == 409 || Header(during, kReplayedHeader) == "true")
      << during.result_int();
  const Response replay = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_EQ(Header(replay, kReplayedHeader), "true");
  EXPECT_EQ(replay.body(), "created");
  EXPECT_EQ(flow.upstream.calls(), 1);
  EXPECT_EQ(flow.metrics.write_attempts(StoreWrite::kComplete, true), 1u);
}

TEST(ProxyFlowTest, FailedReleaseIsRetriedAfterTheResponse) {
  Flow flow;
  flow.upstream.Script(FakeUpstream::Answer(503, "busy"));
  flow.faults->FailFrom(2, UnavailableError("injected"), 1);  // call 2: the Release
  const Response res = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_EQ(res.result_int(), 503u);
  EXPECT_EQ(flow.metrics.write_attempts(StoreWrite::kRelease, true), 1u);
  EXPECT_EQ(flow.Send(Flow::Post("/pay", "k-1")).result_int(), 201u)
      << "the release landed: the retry runs again";
  EXPECT_EQ(flow.upstream.calls(), 2);
}

// A 2xx whose completion the store would not take is never executed again while this gateway
// lives: its retries are answered from memory, within the lease and long after it, until the
// store is back and takes the completion; none reaches the upstream.
TEST(ProxyFlowTest, ACompletionTheStoreRefusesIsNeverExecutedAgainWhileTheGatewayLives) {
  Flow flow;
  flow.upstream.Script(FakeUpstream::Answer(201, "created once"));
  flow.faults->FailFrom(2, UnavailableError("injected: disk full"));  // every call after the Begin
  std::future<Response> first = flow.Start(Flow::Post("/pay", "k-1"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(first); }));
  const Response answered = first.get();
  EXPECT_EQ(answered.result_int(), 201u) << "the client is not kept waiting";
  EXPECT_EQ(flow.pending.size(), 1u);
  EXPECT_EQ(flow.metrics.pending_completions(), 1);

  for (const Duration later : {Duration(0), kLease, 10 * kLease}) {
    SCOPED_TRACE("a retry " + std::to_string(later.count()) + " ms later");
    flow.clock->Advance(later);
    std::future<Response> retry = flow.Start(Flow::Post("/pay", "k-1"));
    ASSERT_TRUE(flow.RunUntil([&] { return Ready(retry); }));
    const Response replay = retry.get();
    EXPECT_EQ(replay.result_int(), 201u) << replay.body();
    EXPECT_EQ(Header(replay, kReplayedHeader), "true");
    EXPECT_EQ(Header(replay, "Content-Type"), Header(answered, "Content-Type"));
    EXPECT_EQ(replay.body(), "created once");
  }
  // Another request under the key is refused as the store would refuse it.
  std::future<Response> other = flow.Start(Flow::Post("/pay", "k-1", R"({"amount":2})"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(other); }));
  EXPECT_TRUE(IsProblem(other.get(), Problem::kKeyReused));
  EXPECT_EQ(flow.upstream.calls(), 1);
  // Long after the lease, attempts go on (or, as before this was fixed, the write is given up).
  const uint64_t failed = flow.metrics.write_attempts(StoreWrite::kComplete, false);
  ASSERT_TRUE(flow.RunUntil([&] {
    return flow.metrics.write_attempts(StoreWrite::kComplete, false) >= failed + 2 ||
           flow.metrics.store_writes_retrying() == 0;
  }));
  EXPECT_EQ(flow.metrics.writes_abandoned(StoreWrite::kComplete), 0u) << "never given up";

  // The store is back: the completion lands, and from then on the store replays it.
  flow.faults->FailFrom(0, Status::Ok());
  ASSERT_TRUE(flow.RunUntil([&] { return flow.pending.size() == 0; }));
  EXPECT_EQ(flow.metrics.pending_completions(), 0);
  EXPECT_EQ(flow.metrics.store_writes_retrying(), 0);
  EXPECT_EQ(flow.metrics.fenced_completions(), 0u);
  const Response stored = flow.Send(Flow::Post("/pay", "k-1"));
  EXPECT_EQ(stored.result_int(), 201u);
  EXPECT_EQ(Header(stored, kReplayedHeader), "true");
  EXPECT_EQ(stored.body(), "created once");
  EXPECT_EQ(flow.upstream.calls(), 1) << "executed once";
  EXPECT_EQ(flow.count(Outcome::kExecuted), 1u);
  EXPECT_EQ(flow.count(Outcome::kReplayed), 4u);
}

// The same for a long-running operation's 202 whose accept the store would not take: its
// retries get the 202 again from memory, never a second execution, until the store takes it.
TEST(ProxyFlowTest, AnAcceptTheStoreRefusesIsAnsweredFromMemoryUntilStored) {
  Flow flow;
  flow.upstream.Script(FakeUpstream::Answer(202, "started"));
  flow.faults->FailCompletions(UnavailableError("injected: disk full"));
  std::future<Response> first = flow.Start(Flow::Post("/operation/report", "op-1"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(first); }));
  EXPECT_EQ(first.get().result_int(), 202u);
  EXPECT_EQ(flow.pending.size(), 1u);
  flow.clock->Advance(10 * kLease);
  std::future<Response> retry = flow.Start(Flow::Post("/operation/report", "op-1"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(retry); }));
  const Response again = retry.get();
  EXPECT_EQ(again.result_int(), 202u) << again.body();
  EXPECT_EQ(Header(again, kReplayedHeader), "true");
  EXPECT_EQ(again.body(), "started");
  EXPECT_EQ(flow.upstream.calls(), 1);

  flow.faults->FailCompletions(Status::Ok());
  ASSERT_TRUE(flow.RunUntil([&] { return flow.pending.size() == 0; }));
  auto record = flow.memory->Get(*Scope::Make("", "", "op-1"));
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->state, RecordState::kInFlight);
  ASSERT_TRUE((*record)->accepted.has_value()) << "the accept is stored";
  EXPECT_EQ((*record)->accepted->body, "started");
  EXPECT_EQ(flow.upstream.calls(), 1);
}

// /readyz on the admin listener, run on the flow's event loop.
Response Readyz(Flow& flow) {
  Request req{http::verb::get, "/readyz", 11};
  auto readyz = [](Services& s, Request r) -> Task<Response> {
    const admin::AdminRoutes routes = AdminRoutesFor(s);
    Response res = co_await admin::AnswerAdminRequest(routes, r);
    co_return std::move(res);
  };
  std::future<Response> res =
      asio::co_spawn(flow.io, readyz(*flow.services, std::move(req)), asio::use_future);
  EXPECT_TRUE(flow.RunUntil([&] { return Ready(res); }));
  return res.get();
}

// The store takes claims but not completions (a disk nearly full). Each completion refused is
// held; at max_pending_completions the gateway forwards no new request (503, counted) rather
// than hold more, while the held keys are still answered; /readyz says not ready while any is
// held, so a load balancer moves traffic away, and ready again once the store took them.
TEST(ProxyFlowTest, AtMaxPendingCompletionsNoNewRequestIsForwardedAndReadyzSaysNotReady) {
  Flow flow;
  EXPECT_EQ(Readyz(flow).result_int(), 200u);
  flow.faults->FailCompletions(UnavailableError("injected: disk full"));
  for (const char* key : {"k-1", "k-2"}) {
    std::future<Response> res = flow.Start(Flow::Post("/pay", key));
    ASSERT_TRUE(flow.RunUntil([&] { return Ready(res); }));
    EXPECT_EQ(res.get().result_int(), 201u);
  }
  ASSERT_EQ(flow.pending.size(), kMaxPending);
  const Response not_ready = Readyz(flow);
  EXPECT_EQ(not_ready.result_int(), 503u);
  EXPECT_NE(not_ready.body().find("2 completion(s) answered but not stored"), std::string::npos)
      << not_ready.body();

  std::future<Response> refused = flow.Start(Flow::Post("/pay", "k-3"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(refused); }));
  const Response unavailable = refused.get();
  EXPECT_TRUE(IsProblem(unavailable, Problem::kStoreUnavailable)) << unavailable.body();
  EXPECT_EQ(Header(unavailable, "Retry-After"), "1");
  EXPECT_EQ(flow.upstream.calls(), 2) << "k-3 never reached the upstream";
  auto k3 = flow.memory->Get(*Scope::Make("", "", "k-3"));
  ASSERT_TRUE(k3.ok());
  EXPECT_FALSE(k3->has_value()) << "k-3 was not claimed either";
  EXPECT_EQ(flow.metrics.pending_refusals(), 1u);
  const std::string metrics = flow.metrics.Render();
  EXPECT_NE(metrics.find("idem_gateway_pending_completions 2\n"), std::string::npos);
  EXPECT_NE(metrics.find("idem_gateway_pending_completions_refused_total 1\n"),
            std::string::npos);

  std::future<Response> held = flow.Start(Flow::Post("/pay", "k-1"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(held); }));
  EXPECT_EQ(Header(held.get(), kReplayedHeader), "true") << "a held key is still answered";

  flow.faults->FailCompletions(Status::Ok());
  ASSERT_TRUE(flow.RunUntil([&] { return flow.pending.size() == 0; }));
  EXPECT_EQ(Readyz(flow).result_int(), 200u);
  EXPECT_EQ(flow.Send(Flow::Post("/pay", "k-3")).result_int(), 201u);
  EXPECT_EQ(flow.upstream.calls(), 3);
}

// Every store call of a client's exchange fails in turn (N = 1, 2, ...): whichever it is, the
// client retrying on 503 ends with the upstream's answer, executed exactly once, then replayed.
TEST(ProxyFlowTest, EveryStoreCallFailingInTurnStillExecutesOnce) {
  int n = 1;
  for (;; ++n) {
    SCOPED_TRACE("store call " + std::to_string(n) + " fails");
    ASSERT_LT(n, 20) << "the exchange never ran without a fault";
    Flow flow;
    flow.faults->FailFrom(n, UnavailableError("injected"), 1);
    auto send_like_a_client = [&] {
      Response res;
      for (int attempt = 0; attempt < 5; ++attempt) {
        res = flow.Send(Flow::Post("/pay", "k-1"));
        if (res.result_int() != 503 && res.result_int() != 409) break;
      }
      return res;
    };
    const Response first = send_like_a_client();
    EXPECT_EQ(first.result_int(), 201u);
    EXPECT_EQ(first.body(), "created");
    const Response again = send_like_a_client();
    EXPECT_EQ(again.result_int(), 201u);
    EXPECT_EQ(Header(again, kReplayedHeader), "true");
    EXPECT_EQ(flow.upstream.calls(), 1);
    if (flow.faults->calls() < n) break;  // call N never came: every failure point was covered
  }
  EXPECT_EQ(n, 4) << "three store calls: Begin, Complete, and the replay's Begin";
}

// The same with an upstream that first answers 503: the Release fails in turn too.
TEST(ProxyFlowTest, EveryStoreCallFailingInTurnAfterATransientAnswer) {
  int n = 1;
  for (;; ++n) {
    SCOPED_TRACE("store call " + std::to_string(n) + " fails");
    ASSERT_LT(n, 20) << "the exchange never ran without a fault";
    Flow flow;
    flow.upstream.Script(FakeUpstream::Answer(503, "busy"));
    flow.faults->FailFrom(n, UnavailableError("injected"), 1);
    Response last;
    for (int attempt = 0; attempt < 6; ++attempt) {
      last = flow.Send(Flow::Post("/pay", "k-1"));
      if (last.result_int() == 201) break;
    }
    EXPECT_EQ(last.result_int(), 201u);
    // The 503 released the key (at once or after the response), so the upstream ran again once;
    // a store 503 before it never reached the upstream.
    EXPECT_EQ(flow.upstream.calls(), 2);
    if (flow.faults->calls() < n) break;
  }
  EXPECT_EQ(n, 5) << "four store calls: Begin, Release, the retry's Begin, Complete";
}

// ---- Wait (Prefer: wait=N) -------------------------------------------------------------------

Request PostPreferringWait(std::string key, std::string prefer, std::string body = R"({"amount":1})") {
  Request req = Flow::Post("/pay", std::move(key), std::move(body));
  req.set("Prefer", std::move(prefer));
  return req;
}

TEST(ProxyFlowTest, DuplicatePreferringToWaitGetsTheFirstAttemptsResponseWhenItCompletes) {
  Flow flow;
  std::future<Response> first =
      flow.StartHeld("/pay", "k-1", FakeUpstream::Answer(201, "created once"));

  std::future<Response> waiting = flow.Start(PostPreferringWait("k-1", "wait=5"));
  ASSERT_TRUE(flow.RunUntil([&] { return flow.waiters.waiting() == 1; }));
  EXPECT_FALSE(Ready(waiting));
  const auto released_at = std::chrono::steady_clock::now();
  flow.upstream.Release();
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(first) && Ready(waiting); }));
  EXPECT_LT(std::chrono::steady_clock::now() - released_at, kSlowPollForTests)
      << "woken by the completion, not by the slow poll";
  const Response replay = waiting.get();
  EXPECT_EQ(replay.result_int(), 201u) << "the original status";
  EXPECT_EQ(replay.body(), "created once");
  EXPECT_EQ(Header(replay, kReplayedHeader), "true");
  EXPECT_EQ(Header(replay, "Preference-Applied"), "wait=5");
  EXPECT_EQ(first.get().body(), "created once");
  EXPECT_EQ(flow.upstream.calls(), 1);
  EXPECT_EQ(flow.count(Outcome::kReplayed), 1u);
  EXPECT_EQ(flow.count(Outcome::kConflict), 0u);
  EXPECT_EQ(flow.metrics.waits_ended(WaitEnd::kReplay), 1u);
  EXPECT_EQ(flow.waiters.waiting(), 0u);
  EXPECT_EQ(flow.faults->calls(), 4)
      << "Begin and Complete for the first; Begin, and Begin again on entering, for the waiter, "
         "which then replays what the completion handed it without asking the store again";
}

// A duplicate waiting for the key (Prefer: wait) gets the answer as soon as the first attempt
// answers, even though its completion could not be stored.
TEST(ProxyFlowTest, AWaiterGetsTheAnswerWhoseCompletionTheStoreRefused) {
  Flow flow;
  std::future<Response> first =
      flow.StartHeld("/pay", "k-1", FakeUpstream::Answer(201, "created once"));
  std::future<Response> waiting = flow.Start(PostPreferringWait("k-1", "wait=5"));
  // The waiter has entered and made its store calls (the two Begins, then its look at the key):
  // only the calls after those fail. Entering alone is not enough; a slow machine would fail
  // the waiter's own look, which is a store error of its own (503), not what this test is about.
  ASSERT_TRUE(flow.RunUntil(
      [&] { return flow.waiters.waiting() == 1 && flow.faults->calls() >= 3; }));
  flow.faults->FailFrom(flow.faults->calls() + 1, UnavailableError("injected"));
  flow.upstream.Release();
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(first) && Ready(waiting); }));
  const Response replay = waiting.get();
  EXPECT_EQ(replay.result_int(), 201u) << replay.body();
  EXPECT_EQ(Header(replay, kReplayedHeader), "true");
  EXPECT_EQ(replay.body(), "created once");
  EXPECT_EQ(flow.upstream.calls(), 1);
  EXPECT_EQ(flow.pending.size(), 1u);
}

TEST(ProxyFlowTest, DuplicatePreferringToWaitExecutesWhenTheFirstAttemptIsReleased) {
  Flow flow;
  std::future<Response> first =
      flow.StartHeld("/pay", "k-1", FakeUpstream::Answer(503, "try later"));
  flow.upstream.Script(FakeUpstream::Answer(201, "second attempt"));
  std::future<Response> waiting = flow.Start(PostPreferringWait("k-1", "respond-async, wait=5"));
  ASSERT_TRUE(flow.RunUntil([&] { return flow.waiters.waiting() == 1; }));

  flow.upstream.Release();  // the first attempt answers 503: the key is released
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(first) && Ready(waiting); }));
  EXPECT_EQ(first.get().result_int(), 503u);
  const Response executed = waiting.get();
  EXPECT_EQ(executed.result_int(), 201u);
  EXPECT_EQ(executed.body(), "second attempt");
  EXPECT_EQ(Header(executed, kReplayedHeader), "false");
  EXPECT_EQ(Header(executed, "Preference-Applied"), "wait=5");
  ASSERT_EQ(flow.upstream.calls(), 2);
  EXPECT_GT(TokenSent(flow.upstream.requests()[1]), TokenSent(flow.upstream.requests()[0]));
  EXPECT_EQ(flow.metrics.waits_ended(WaitEnd::kExecution), 1u);
}

TEST(ProxyFlowTest, WaitEndsIn409AtItsDeadlineAndAnotherBodyGets422WithoutWaiting) {
  Flow flow;
  std::future<Response> first = flow.StartHeld("/pay", "k-1");

  const auto started = std::chrono::steady_clock::now();
  std::future<Response> waiting = flow.Start(PostPreferringWait("k-1", "wait=1"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(waiting); }));
  EXPECT_GE(std::chrono::steady_clock::now() - started, 1s);
  const Response conflict = waiting.get();
  EXPECT_TRUE(IsProblem(conflict, Problem::kKeyInFlight)) << conflict.body();
  EXPECT_EQ(Header(conflict, "Preference-Applied"), "wait=1");
  EXPECT_NE(Header(conflict, "Retry-After"), "(absent)");
  EXPECT_EQ(flow.metrics.waits_ended(WaitEnd::kTimeout), 1u);

  std::future<Response> other = flow.Start(PostPreferringWait("k-1", "wait=5", R"({"amount":2})"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(other); }));
  EXPECT_TRUE(IsProblem(other.get(), Problem::kKeyReused));
  EXPECT_FALSE(Ready(first));
  flow.upstream.Release();
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(first); }));
  EXPECT_EQ(flow.upstream.calls(), 1);
}

TEST(ProxyFlowTest, NoWaitWithoutThePreferenceOnARouteWithMaxWaitZeroOrBeyondMaxWaiters) {
  Flow flow;
  flow.options.routes.back().max_wait = Duration(0);
  RoutePolicy waiting_route;
  waiting_route.method = "POST";
  waiting_route.path_prefix = "/wait";
  waiting_route.lease = kLease;
  waiting_route.max_wait = 2s;
  flow.options.routes.insert(flow.options.routes.begin(), waiting_route);
  std::future<Response> first = flow.StartHeld("/pay", "k-1");
  std::future<Response> first_wait = flow.StartHeld("/wait", "k-2");

  // max_wait = 0 on /pay: 409 at once, no Preference-Applied.
  std::future<Response> refused = flow.Start(PostPreferringWait("k-1", "wait=5"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(refused); }));
  const Response conflict = refused.get();
  EXPECT_TRUE(IsProblem(conflict, Problem::kKeyInFlight));
  EXPECT_EQ(Header(conflict, "Preference-Applied"), "(absent)");

  // A value that is not a number of seconds is ignored (RFC 7240), as is wait=0.
  for (const char* prefer : {"wait=soon", "wait=0", "wait"}) {
    Request req = Flow::Post("/wait", "k-2");
    req.set("Prefer", prefer);
    std::future<Response> answer = flow.Start(std::move(req));
    ASSERT_TRUE(flow.RunUntil([&] { return Ready(answer); })) << prefer;
    EXPECT_TRUE(IsProblem(answer.get(), Problem::kKeyInFlight)) << prefer;
  }

  // 16 waiters (the Flow's max_waiters) fill the gateway; the 17th gets 409 at once.
  std::vector<std::future<Response>> waiters;
  for (int i = 0; i < 16; ++i) {
    Request req = Flow::Post("/wait", "k-2");
    req.set("Prefer", "wait=30");
    waiters.push_back(flow.Start(std::move(req)));
  }
  ASSERT_TRUE(flow.RunUntil([&] { return flow.waiters.waiting() == 16; }));
  Request extra = Flow::Post("/wait", "k-2");
  extra.set("Prefer", "wait=30");
  std::future<Response> beyond = flow.Start(std::move(extra));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(beyond); }));
  EXPECT_TRUE(IsProblem(beyond.get(), Problem::kKeyInFlight));
  EXPECT_NE(flow.metrics.Render().find("idem_gateway_waits_refused_total 1"), std::string::npos);

  // The route's max_wait (2 s) caps the client's 30 s.
  ASSERT_TRUE(flow.RunUntil([&] {
    return std::all_of(waiters.begin(), waiters.end(), [](auto& f) { return Ready(f); });
  }));
  for (auto& f : waiters) EXPECT_TRUE(IsProblem(f.get(), Problem::kKeyInFlight));
  EXPECT_EQ(flow.metrics.waits_ended(WaitEnd::kTimeout), 16u);
  flow.upstream.Release();
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(first) && Ready(first_wait); }));
  EXPECT_EQ(flow.upstream.calls(), 2);
}

// A client connection that the test hangs up by hand.
class FakeClient final : public flow::ClientHangup {
 public:
  void Watch(std::function<void()> on_hangup) override { on_hangup_ = std::move(on_hangup); }
  void Stop() override {
    on_hangup_ = nullptr;
    ++stops;
  }
  bool watched() const { return static_cast<bool>(on_hangup_); }
  void HangUp() {
    if (on_hangup_) on_hangup_();
  }
  int stops = 0;

 private:
  std::function<void()> on_hangup_;
};

TEST(ProxyFlowTest, AWaiterWhoseClientHangsUpLeavesAtOnceAndNeverClaimsTheKey) {
  Flow flow;
  std::future<Response> first =
      flow.StartHeld("/pay", "k-1", FakeUpstream::Answer(503, "try later"));
  FakeClient client;
  std::future<Response> waiting = flow.Start(PostPreferringWait("k-1", "wait=30"), &client);
  ASSERT_TRUE(flow.RunUntil([&] { return flow.waiters.waiting() == 1 && client.watched(); }));

  client.HangUp();
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(waiting); }));
  EXPECT_EQ(flow.waiters.waiting(), 0u) << "the slot is free at once, not at the 30 s deadline";
  EXPECT_TRUE(IsProblem(waiting.get(), Problem::kKeyInFlight));
  EXPECT_EQ(flow.metrics.waits_ended(WaitEnd::kHangup), 1u);
  EXPECT_EQ(client.stops, 1);

  // The first attempt is then released: nobody claims the key for the client who left.
  flow.upstream.Release();
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(first); }));
  EXPECT_EQ(first.get().result_int(), 503u);
  EXPECT_EQ(flow.upstream.calls(), 1);

  // A client that stays is watched for the whole wait, and the watch ends with it.
  Flow other;
  FakeClient patient;
  std::future<Response> second = other.StartHeld("/pay", "k-2", FakeUpstream::Answer(201, "ok"));
  std::future<Response> waits = other.Start(PostPreferringWait("k-2", "wait=30"), &patient);
  ASSERT_TRUE(other.RunUntil([&] { return patient.watched(); }));
  other.upstream.Release();
  ASSERT_TRUE(other.RunUntil([&] { return Ready(second) && Ready(waits); }));
  EXPECT_EQ(waits.get().body(), "ok");
  EXPECT_FALSE(patient.watched());
  EXPECT_EQ(patient.stops, 1);
}

TEST(ProxyFlowTest, ShutdownWakesWaitersWith503AndRetryAfter) {
  Flow flow;
  std::future<Response> first = flow.StartHeld("/pay", "k-1");
  std::future<Response> waiting = flow.Start(PostPreferringWait("k-1", "wait=10"));
  ASSERT_TRUE(flow.RunUntil([&] { return flow.waiters.waiting() == 1; }));

  flow.waiters.Shutdown();
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(waiting); }));
  const Response unavailable = waiting.get();
  EXPECT_TRUE(IsProblem(unavailable, Problem::kShuttingDown)) << unavailable.body();
  EXPECT_EQ(Header(unavailable, "Retry-After"), "1");
  EXPECT_EQ(flow.metrics.waits_ended(WaitEnd::kOther), 1u);
  // New waiters are refused from then on: 409 at once.
  std::future<Response> late = flow.Start(PostPreferringWait("k-1", "wait=10"));
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(late); }));
  EXPECT_TRUE(IsProblem(late.get(), Problem::kKeyInFlight));
  flow.upstream.Release();
  ASSERT_TRUE(flow.RunUntil([&] { return Ready(first); }));
  EXPECT_EQ(flow.upstream.calls(), 1);
}

}  // namespace
}  // namespace idem::gateway
