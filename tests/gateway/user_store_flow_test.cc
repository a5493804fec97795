// The gateway's request flow over a store a user writes: a class that implements the eight
// methods of Store and nothing else. The executor and the gateway find none of the built-in
// stores' execution hooks on it (store_execution.h), so every call runs on the executor's pool,
// and a duplicate waiting for the key (Prefer: wait) is still woken in process by the
// completion. No sockets: a scripted FakeUpstream, on one single-threaded io_context.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include "gateway/flow/wait.h"
#include "gateway/proxy.h"
#include "idem/store.h"
#include "store/store_execution.h"
#include "util/fake_upstream.h"
#include "util/run_io_until.h"

namespace idem::gateway {
namespace {

using namespace std::chrono_literals;
using testing::FakeUpstream;

// A user's store: Store's methods only (the records themselves live in a memory store). Counts
// its calls, and those that ran on the thread that made the store (the test's, the event loop).
class UserStore final : public Store {
 public:
  explicit UserStore(Store& records) : records_(records) {}

  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fingerprint,
                             Duration lease) override {
    Count();
    return records_.Begin(scope, fingerprint, lease);
  }
  Result<CompleteOutcome> Complete(const Scope& scope, FencingToken token,
                                   const StoredResponse& response, Duration ttl) override {
    Count();
    return records_.Complete(scope, token, response, ttl);
  }
  Result<ReleaseOutcome> Release(const Scope& scope, FencingToken token) override {
    Count();
    return records_.Release(scope, token);
  }
  Result<CompleteOutcome> Accept(const Scope& scope, FencingToken token,
                                 const StoredResponse& accepted, Duration lease) override {
    Count();
    return records_.Accept(scope, token, accepted, lease);
  }
  Result<std::optional<Record>> Get(const Scope& scope) override {
    Count();
    return records_.Get(scope);
  }
  Result<bool> Purge(const Scope& scope) override {
    Count();
    return records_.Purge(scope);
  }
  Result<uint64_t> Sweep(TimePoint now) override { return records_.Sweep(now); }
  std::string Describe() const override { return "a user's store"; }

  std::atomic<int> calls{0};
  std::atomic<int> calls_on_event_loop{0};

 private:
  void Count() {
    ++calls;
    if (std::this_thread::get_id() == event_loop_) ++calls_on_event_loop;
  }

  Store& records_;
  const std::thread::id event_loop_ = std::this_thread::get_id();
};

class UserStoreFlowTest : public ::testing::Test {
 protected:
  UserStoreFlowTest() {
    options.upstream = "http://127.0.0.1:1";
    RoutePolicy pay;
    pay.method = "POST";
    pay.path_prefix = "/";
    pay.lease = 10s;
    options.routes = {pay};
  }

  ~UserStoreFlowTest() override {
    upstream.Release();
    io.run();  // let every request and store write end before the executor goes
  }

  static Request Post(std::string key, std::string prefer = "") {
    Request req{http::verb::post, "/pay", 11};
    req.set(http::field::host, "gateway.test");
    req.set(http::field::content_type, "application/json");
    req.set(kKeyHeader, key);
    if (!prefer.empty()) req.set("Prefer", prefer);
    req.body() = R"({"amount":1})";
    req.keep_alive(true);
    req.prepare_payload();
    return req;
  }

  std::future<Response> Start(Request request) {
    return asio::co_spawn(io, Handle(services, std::move(request)), asio::use_future);
  }

  // Runs the event loop until `done` holds (util/run_io_until.h).
  template <typename Pred>
  bool RunUntil(Pred done) {
    return testing::RunIoUntil(io, done);
  }

  static bool Ready(const std::future<Response>& f) {
    return f.wait_for(0s) == std::future_status::ready;
  }

  GatewayOptions options;
  FakeUpstream upstream;
  Metrics metrics;
  Log log{false};
  KeyWaiters waiters{16};
  PendingCompletions pending{16};
  asio::io_context io;
  std::unique_ptr<Store> records = std::move(*OpenStore("memory"));
  UserStore store{*records};
  StoreExecutor executor{store, StoreExecutor::Options{1, 64}};  // destroyed before the store
  Services services{options, executor, upstream, metrics, log, waiters, pending};

 private:
  static Task<Response> Handle(Services& s, Request request) {
    Response response = co_await HandleProxyRequest(s, request, nullptr);
    co_return std::move(response);
  }
};

TEST_F(UserStoreFlowTest, AStoreWithOnlyStoresMethodsHasHooksThatDoNothing) {
  internal::ExecutionHooks& hooks = internal::HooksOf(store);
  EXPECT_EQ(&executor.hooks(), &hooks);
  EXPECT_FALSE(hooks.NeverBlocks()) << "although the memory store it holds never blocks";
  EXPECT_EQ(hooks.Degradation(), "");
  EXPECT_TRUE(hooks.OpenConnections(4).ok());
  EXPECT_TRUE(hooks.Watch(Scope{"t", "", "k"}).ok());
  auto subscription = hooks.SubscribeSettled([](const internal::SettleNotice&) {});
  ASSERT_TRUE(subscription.ok());
  EXPECT_EQ(*subscription, nullptr) << "no settle notices";
  EXPECT_EQ(internal::WriteQueueOf(store), nullptr);
  EXPECT_EQ(store.calls, 0);
}

TEST_F(UserStoreFlowTest, RequestsAreClaimedCompletedAndReplayedThroughTheExecutorsPool) {
  upstream.Script(FakeUpstream::Answer(201, "created once"));
  std::future<Response> first = Start(Post("k-1"));
  ASSERT_TRUE(RunUntil([&] { return Ready(first); }));
  const Response executed = first.get();
  EXPECT_EQ(executed.result_int(), 201u);
  EXPECT_EQ(executed.body(), "created once");
  // The completion is stored after the response: wait for it before the duplicate.
  ASSERT_TRUE(RunUntil([&] { return store.calls >= 2; }));

  std::future<Response> again = Start(Post("k-1"));
  ASSERT_TRUE(RunUntil([&] { return Ready(again); }));
  const Response replay = again.get();
  EXPECT_EQ(replay.result_int(), 201u);
  EXPECT_EQ(replay.body(), "created once");
  EXPECT_EQ(replay[kReplayedHeader], "true");
  EXPECT_EQ(upstream.calls(), 1);
  EXPECT_EQ(store.calls, 3) << "Begin and Complete for the first, Begin for the replay";
  EXPECT_EQ(store.calls_on_event_loop, 0) << "a store that may block runs on the pool";
}

TEST_F(UserStoreFlowTest, ADuplicateWaitingForTheKeyIsWokenByTheCompletion) {
  FakeUpstream::Step held = FakeUpstream::Answer(201, "created once");
  held.hold = true;
  upstream.Script(held);
  std::future<Response> first = Start(Post("k-1"));
  ASSERT_TRUE(RunUntil([&] { return upstream.held() == 1; }));

  std::future<Response> waiting = Start(Post("k-1", "wait=5"));
  ASSERT_TRUE(RunUntil([&] { return waiters.waiting() == 1; }));
  EXPECT_FALSE(Ready(waiting));
  const auto released_at = std::chrono::steady_clock::now();
  upstream.Release();
  ASSERT_TRUE(RunUntil([&] { return Ready(first) && Ready(waiting); }));
  EXPECT_LT(std::chrono::steady_clock::now() - released_at, flow::kSlowPoll / 2)
      << "woken by the completion, not by the slow look";
  const Response replay = waiting.get();
  EXPECT_EQ(replay.result_int(), 201u);
  EXPECT_EQ(replay.body(), "created once");
  EXPECT_EQ(replay[kReplayedHeader], "true");
  EXPECT_EQ(replay["Preference-Applied"], "wait=5");
  EXPECT_EQ(upstream.calls(), 1);
  EXPECT_EQ(metrics.waits_ended(WaitEnd::kReplay), 1u);
  EXPECT_EQ(store.calls_on_event_loop, 0);
}

}  // namespace
}  // namespace idem::gateway
