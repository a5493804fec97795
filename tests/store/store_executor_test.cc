// StoreExecutor: blocking stores driven from an Asio event loop. Runs under TSan in CI.
#include "store/store_executor.h"

#include <gtest/gtest.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "idem/fingerprint.h"
#include "idem/store_wrapper.h"
#include "util/fault_store.h"
#include "util/temp_dir.h"

#include "util/test_fingerprint.h"

namespace idem {
namespace {

namespace asio = boost::asio;
using std::chrono::seconds;
using testing::Fp;


std::unique_ptr<Store> Memory() { return std::move(*OpenStore("memory")); }

TEST(StoreExecutorTest, CompletesOnTheCallersExecutorNotAPoolThread) {
  auto store = Memory();
  asio::io_context io;  // outlives the executor: see StoreExecutor's REQUIRES
  StoreExecutor executor(*store, {2, 16});
  std::thread::id handler_thread;
  Result<BeginOutcome> result = InternalError("not called");
  executor.AsyncBegin(Scope{"t", "", "k"}, Fp(), seconds(30),
                      asio::bind_executor(io, [&](Result<BeginOutcome> r) {
                        handler_thread = std::this_thread::get_id();
                        result = std::move(r);
                      }));
  io.run();  // returns only after the handler ran: the executor holds work on io meanwhile
  EXPECT_EQ(handler_thread, std::this_thread::get_id());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(std::holds_alternative<Acquired>(*result));
}

// Records the thread each Begin runs on, and says whether it blocks; forwards everything else.
class ThreadRecordingStore : public StoreWrapper, public internal::ExecutionHooks {
 public:
  ThreadRecordingStore(Store& inner, bool never_blocks)
      : StoreWrapper(inner), never_blocks_(never_blocks) {}
  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fp, Duration lease) override {
    begin_thread = std::this_thread::get_id();
    return StoreWrapper::Begin(scope, fp, lease);
  }
  bool NeverBlocks() const override { return never_blocks_; }
  std::thread::id begin_thread;

 private:
  bool never_blocks_;
};

TEST(StoreExecutorTest, StoresThatNeverBlockRunOnTheCallersThreadAndStillCompleteLater) {
  auto memory = Memory();
  EXPECT_TRUE(internal::HooksOf(*memory).NeverBlocks());
  for (const bool never_blocks : {true, false}) {
    ThreadRecordingStore store(*memory, never_blocks);
    asio::io_context io;
    StoreExecutor executor(store, {1, 16});
    bool handled = false;
    executor.AsyncBegin(Scope{"t", "", never_blocks ? "inline" : "pooled"}, Fp(), seconds(30),
                        asio::bind_executor(io, [&](Result<BeginOutcome> r) {
                          EXPECT_TRUE(r.ok());
                          handled = true;
                        }));
    EXPECT_FALSE(handled) << "a completion is never invoked inside the initiating call";
    io.run();
    EXPECT_TRUE(handled);
    if (never_blocks) {
      EXPECT_EQ(store.begin_thread, std::this_thread::get_id());
    } else {
      EXPECT_NE(store.begin_thread, std::this_thread::get_id());
    }
  }
}

// Records the thread each Begin runs on and overrides nothing else, as a FaultStore does.
class BeginThreadStore final : public StoreWrapper {
 public:
  using StoreWrapper::StoreWrapper;
  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fp, Duration lease) override {
    begin_thread = std::this_thread::get_id();
    return StoreWrapper::Begin(scope, fp, lease);
  }
  std::thread::id begin_thread;
};

TEST(StoreExecutorTest, AWrapperSaysWhatItsTargetSaysAboutBlocking) {
  auto memory = Memory();
  ThreadRecordingStore blocking(*memory, /*never_blocks=*/false);
  for (Store* target : {static_cast<Store*>(memory.get()), static_cast<Store*>(&blocking)}) {
    BeginThreadStore wrapped(*target);
    EXPECT_EQ(&internal::HooksOf(wrapped), &internal::HooksOf(*target));
    asio::io_context io;
    StoreExecutor executor(wrapped, {1, 16});
    bool handled = false;
    executor.AsyncBegin(Scope{"t", "", target == memory.get() ? "inline" : "pooled"}, Fp(),
                        seconds(30), asio::bind_executor(io, [&](Result<BeginOutcome> r) {
                          EXPECT_TRUE(r.ok());
                          handled = true;
                        }));
    io.run();
    EXPECT_TRUE(handled);
    // Over the memory store the call runs inline, on this thread; over a blocking store, on
    // the executor's pool.
    EXPECT_EQ(wrapped.begin_thread == std::this_thread::get_id(),
              internal::HooksOf(*target).NeverBlocks());
  }
}

TEST(StoreExecutorTest, CoroutinesRaceOneScopeAndExactlyOneAcquires) {
  auto store = Memory();
  asio::io_context io;
  StoreExecutor executor(*store, {4, 1024});
  std::atomic<int> acquired{0}, in_flight{0}, replayed{0}, completed{0};
  for (int i = 0; i < 64; ++i) {
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          const Scope scope{"t", "", "shared"};
          auto r = co_await executor.AsyncBegin(scope, Fp(), seconds(30), asio::use_awaitable);
          if (!r.ok()) co_return;
          if (auto token = OwnedToken(*r)) {
            ++acquired;
            // Named, not a temporary: g++ 12 mishandles temporaries inside co_await
            // expressions (it can destroy them twice), so keep arguments in locals.
            StoredResponse response{201, {}, "done"};
            auto c = co_await executor.AsyncComplete(scope, *token, std::move(response),
                                                     seconds(60), asio::use_awaitable);
            if (c.ok() && *c == CompleteOutcome::kOk) ++completed;
          } else if (std::holds_alternative<InFlight>(*r)) {
            ++in_flight;
          } else if (std::holds_alternative<Replay>(*r)) {
            ++replayed;
          }
        },
        asio::detached);
  }
  std::thread second([&] { io.run(); });
  io.run();
  second.join();
  EXPECT_EQ(acquired.load(), 1);
  EXPECT_EQ(completed.load(), 1);
  EXPECT_EQ(in_flight.load() + replayed.load(), 63);
  auto replay = store->Begin(Scope{"t", "", "shared"}, Fp(), seconds(30));
  ASSERT_TRUE(replay.ok());
  EXPECT_TRUE(std::holds_alternative<Replay>(*replay));
}

// Counts the writes that reach it; overrides nothing else.
class WriteCountingStore final : public StoreWrapper {
 public:
  using StoreWrapper::StoreWrapper;
  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fp, Duration lease) override {
    ++begins;
    return StoreWrapper::Begin(scope, fp, lease);
  }
  Result<CompleteOutcome> Complete(const Scope& scope, FencingToken token,
                                   const StoredResponse& response, Duration ttl) override {
    ++completes;
    return StoreWrapper::Complete(scope, token, response, ttl);
  }
  std::atomic<int> begins{0};
  std::atomic<int> completes{0};
};

// SQLite's writes queue for a shared commit (its Submit calls). Around it, a wrapper's own
// Begin and Complete run: the executor never submits to the queue behind the wrapper's back.
TEST(StoreExecutorTest, AWrapperAroundAStoreWithAWriteQueueRunsItsOwnWrites) {
  testing::TempDir dir;
  auto sqlite = OpenStore("sqlite:" + dir.File("idem.db"));
  ASSERT_TRUE(sqlite.ok()) << sqlite.status().ToString();
  ASSERT_NE(internal::WriteQueueOf(**sqlite), nullptr);
  WriteCountingStore wrapped(**sqlite);
  EXPECT_EQ(internal::WriteQueueOf(wrapped), nullptr);
  EXPECT_EQ(&internal::HooksOf(wrapped), &internal::HooksOf(**sqlite));

  asio::io_context io;
  StoreExecutor executor(wrapped, {1, 16});
  const Scope scope{"t", "", "k"};
  std::optional<Result<CompleteOutcome>> completed;
  executor.AsyncBegin(scope, Fp(), seconds(30),
                      asio::bind_executor(io, [&](Result<BeginOutcome> begun) {
                        ASSERT_TRUE(begun.ok()) << begun.status().ToString();
                        executor.AsyncComplete(scope, *OwnedToken(*begun),
                                               StoredResponse{201, {}, "created"}, seconds(60),
                                               asio::bind_executor(io, [&](auto r) {
                                                 completed = std::move(r);
                                               }));
                      }));
  io.run();
  ASSERT_TRUE(completed.has_value());
  ASSERT_TRUE(completed->ok()) << completed->status().ToString();
  EXPECT_EQ(**completed, CompleteOutcome::kOk);
  EXPECT_EQ(wrapped.begins, 1);
  EXPECT_EQ(wrapped.completes, 1);
  auto replay = (*sqlite)->Begin(scope, Fp(), seconds(30));
  ASSERT_TRUE(replay.ok());
  EXPECT_TRUE(std::holds_alternative<Replay>(*replay));
}

// A store whose calls block until the test lets them go.
class GateStore final : public StoreWrapper, public internal::ExecutionHooks {
 public:
  using StoreWrapper::StoreWrapper;
  // It blocks, whatever the store it wraps says.
  bool NeverBlocks() const override { return false; }
  Result<std::optional<Record>> Get(const Scope& s) override {
    std::unique_lock lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    return StoreWrapper::Get(s);
  }
  void WaitForWaiting(int n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return waiting_ >= n; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

TEST(StoreExecutorTest, RefusesCallsBeyondMaxPendingWithResourceExhausted) {
  auto memory = Memory();
  GateStore gate(*memory);
  StoreExecutor executor(gate, {1, 2});
  auto first = executor.AsyncGet(Scope{"t", "", "a"}, asio::use_future);
  auto second = executor.AsyncGet(Scope{"t", "", "b"}, asio::use_future);
  gate.WaitForWaiting(1);
  EXPECT_EQ(executor.pending(), 2);
  auto refused = executor.AsyncGet(Scope{"t", "", "c"}, asio::use_future).get();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  gate.Open();
  EXPECT_TRUE(first.get().ok());
  EXPECT_TRUE(second.get().ok());
  EXPECT_EQ(executor.pending(), 0);
}

TEST(StoreExecutorTest, StoreErrorsArriveAsValues) {
  auto memory = Memory();
  testing::FaultStore faulty(*memory);
  faulty.FailFrom(2, UnavailableError("injected: connection refused"), 1);
  StoreExecutor executor(faulty, {2, 16});
  auto ok = executor.AsyncBegin(Scope{"t", "", "k"}, Fp(), seconds(30), asio::use_future).get();
  ASSERT_TRUE(ok.ok());
  auto token = OwnedToken(*ok);
  ASSERT_TRUE(token.has_value());
  auto failed =
      executor.AsyncComplete(Scope{"t", "", "k"}, *token, {200, {}, ""}, seconds(60),
                             asio::use_future)
          .get();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
  // The failed Complete may be retried with the same arguments.
  auto retried =
      executor.AsyncComplete(Scope{"t", "", "k"}, *token, {200, {}, ""}, seconds(60),
                             asio::use_future)
          .get();
  ASSERT_TRUE(retried.ok());
  EXPECT_EQ(*retried, CompleteOutcome::kOk);
}

TEST(StoreExecutorTest, ACallRunsToTheEndEvenIfTheCallersLoopIsGone) {
  auto store = Memory();
  const Scope scope{"t", "", "k"};
  const FencingToken token = *OwnedToken(*store->Begin(scope, Fp(), seconds(30)));
  {
    asio::io_context io;  // declared first: it must outlive the executor's last post to it
    StoreExecutor executor(*store, {1, 16});
    executor.AsyncComplete(scope, token, {201, {}, "kept"}, seconds(60),
                           asio::bind_executor(io, [](Result<CompleteOutcome>) {}));
    // The caller's loop never runs its handler; the executor still finishes the write.
  }
  auto replay = store->Begin(scope, Fp(), seconds(30));
  ASSERT_TRUE(replay.ok());
  ASSERT_TRUE(std::holds_alternative<Replay>(*replay));
  EXPECT_EQ(std::get<Replay>(*replay).response.body, "kept");
}

}  // namespace
}  // namespace idem
