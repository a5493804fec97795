// KeyWaiters across threads: waiters on strands of an io_context run by several threads, woken
// by Notify and Shutdown called from other threads (the way the gateway's completions and its
// signal handler call them). Run under ThreadSanitizer in the tsan stage.
#include "gateway/key_waiters.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include "util/wait_for.h"

namespace idem::gateway {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// An io_context run by `threads` threads until the object goes.
class Loop {
 public:
  explicit Loop(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { io.run(); });
  }
  ~Loop() {
    work_.reset();
    for (auto& t : threads_) t.join();
  }
  asio::io_context io;

 private:
  asio::executor_work_guard<asio::io_context::executor_type> work_{io.get_executor()};
  std::vector<std::thread> threads_;
};

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout = 5s) {
  return testing::WaitFor(done, timeout, 1ms);
}

struct Counts {
  std::atomic<int> entered{0}, refused{0}, woken{0}, shut_down{0};
};

// Enters for `key` on a strand of its own and waits once until `until`; counts what happened.
void SpawnWaiter(Loop& loop, KeyWaiters& waiters, std::string key, SteadyClock::time_point until,
                 Counts& counts) {
  auto strand = asio::make_strand(loop.io);
  asio::co_spawn(
      strand,
      [&waiters, key = std::move(key), until, &counts]() -> Task<void> {
        auto executor = co_await asio::this_coro::executor;
        auto slot = waiters.Enter(key, executor);
        if (!slot) {
          ++counts.refused;
          co_return;
        }
        ++counts.entered;
        co_await slot->Wait(until);
        if (slot->shutting_down()) ++counts.shut_down;
        ++counts.woken;
      },
      asio::detached);
}

// What waiters woken with or without a completion did.
struct Handovers {
  std::atomic<int> handed{0}, bare{0}, leads{0}, returned{0};
};

// Enters for `key` on a strand of its own and waits once. Counts a handed completion of a 201
// "receipt" for `fingerprint`, or a wake-up without one; a waiter chosen to read for the others
// (TakeLead) is counted and wakes them, as the gateway's does.
void SpawnHandoverWaiter(Loop& loop, KeyWaiters& waiters, std::string key,
                         const Fingerprint& fingerprint, Handovers& counts) {
  asio::co_spawn(
      asio::make_strand(loop.io),
      [&waiters, key = std::move(key), &fingerprint, &counts]() -> Task<void> {
        auto slot = waiters.Enter(key, co_await asio::this_coro::executor);
        co_await slot->Wait(SteadyClock::now() + 60s);
        const auto& done = slot->completed();
        if (done && done->response.status == 201 && done->response.body == "receipt" &&
            done->fingerprint == fingerprint) {
          ++counts.handed;
        } else if (!done) {
          ++counts.bare;
        }
        if (slot->TakeLead()) {
          ++counts.leads;
          waiters.NotifyOthers(*slot);
        }
        ++counts.returned;
      },
      asio::detached);
}

StoredResponse Receipt() {
  StoredResponse response;
  response.status = 201;
  response.body = "receipt";
  return response;
}

TEST(KeyWaitersTest, NotifyWakesTheWaitersOfThatKeyOnlyAndShutdownWakesTheRest) {
  KeyWaiters waiters(100);  // outlives the loop: its threads may still be leaving slots
  Loop loop(3);
  Counts a, b;
  const auto far = SteadyClock::now() + 60s;
  for (int i = 0; i < 20; ++i) {
    SpawnWaiter(loop, waiters, "a", far, a);
    SpawnWaiter(loop, waiters, "b", far, b);
  }
  ASSERT_TRUE(WaitUntil([&] { return waiters.waiting() == 40; }));
  waiters.Notify("a");
  ASSERT_TRUE(WaitUntil([&] { return a.woken == 20; }));
  // Nothing to wait for: b's waiters must stay asleep. A wake-up Notify("a") posted to them
  // would have run within this window, as a's did.
  EXPECT_TRUE(testing::HoldsFor([&] { return b.woken == 0; }, 50ms))
      << "a key's notification wakes no other key's waiters";
  EXPECT_EQ(waiters.waiting(), 20u);
  waiters.Shutdown();
  ASSERT_TRUE(WaitUntil([&] { return b.woken == 20; }));
  EXPECT_EQ(b.shut_down, 20);
  EXPECT_EQ(a.shut_down, 0);
  ASSERT_TRUE(WaitUntil([&] { return waiters.waiting() == 0; }));
  EXPECT_EQ(waiters.Enter("a", loop.io.get_executor()), nullptr) << "none enter after shutdown";
}

TEST(KeyWaitersTest, ACompletionHandsItsResponseToTheWaitersAReleaseDoesNot) {
  KeyWaiters waiters(10);
  Loop loop(2);
  Handovers counts;
  const Fingerprint fingerprint(Fingerprint::Bytes{1, 2, 3});
  SpawnHandoverWaiter(loop, waiters, "done", fingerprint, counts);
  SpawnHandoverWaiter(loop, waiters, "done", fingerprint, counts);
  SpawnHandoverWaiter(loop, waiters, "released", fingerprint, counts);
  ASSERT_TRUE(WaitUntil([&] { return waiters.waiting() == 3; }));
  const StoredResponse response = Receipt();
  waiters.NotifyCompleted("done", response, fingerprint);
  waiters.Notify("released");
  waiters.NotifyCompleted("nobody waits", response, fingerprint);  // copies nothing, wakes none
  ASSERT_TRUE(WaitUntil([&] { return counts.returned == 3; }));
  EXPECT_EQ(counts.handed, 2);
  EXPECT_EQ(counts.bare, 1);
}

// A settle notice wakes one waiter of the key, chosen to read for all (TakeLead); it then wakes
// the others itself, here with NotifyOthers, which leaves the reader alone.
TEST(KeyWaitersTest, NotifyOneWakesASingleReaderWhichWakesTheOthers) {
  KeyWaiters waiters(10);
  Loop loop(2);
  std::atomic<int> woken{0}, leads{0}, woken_twice{0}, returned{0};
  auto spawn = [&] {
    asio::co_spawn(
        asio::make_strand(loop.io),
        [&]() -> Task<void> {
          auto slot = waiters.Enter("k", co_await asio::this_coro::executor);
          if (co_await slot->Wait(SteadyClock::now() + 60s)) ++woken;
          if (slot->TakeLead()) {
            ++leads;
            EXPECT_FALSE(slot->TakeLead()) << "the lead is taken once";
            waiters.NotifyOthers(*slot);
            // The reader is not woken by its own NotifyOthers.
            if (co_await slot->Wait(SteadyClock::now() + 200ms)) ++woken_twice;
          }
          ++returned;
        },
        asio::detached);
  };
  for (int i = 0; i < 5; ++i) spawn();
  ASSERT_TRUE(WaitUntil([&] { return waiters.waiting() == 5; }));
  waiters.NotifyOne("nobody waits");  // wakes none
  waiters.NotifyOne("k");
  ASSERT_TRUE(WaitUntil([&] { return returned == 5; }));
  EXPECT_EQ(woken, 5);
  EXPECT_EQ(leads, 1);
  EXPECT_EQ(woken_twice, 0);
}

// A settle notice from the store: one that carried the response hands it to every waiter of the
// key (none reads); one that names only the key wakes a single reader.
TEST(KeyWaitersTest, ASettleNoticeHandsACarriedResponseToAllElseWakesOneReader) {
  KeyWaiters waiters(10);
  Loop loop(2);
  Handovers counts;
  const Fingerprint fingerprint(Fingerprint::Bytes{4, 5, 6});
  for (int i = 0; i < 3; ++i) SpawnHandoverWaiter(loop, waiters, "carried", fingerprint, counts);
  for (int i = 0; i < 3; ++i) SpawnHandoverWaiter(loop, waiters, "key-only", fingerprint, counts);
  ASSERT_TRUE(WaitUntil([&] { return waiters.waiting() == 6; }));
  const StoredResponse response = Receipt();
  internal::SettleNotice carried;
  carried.scope_digest = "carried";
  carried.fingerprint = &fingerprint;
  carried.response = &response;
  waiters.NotifySettled(carried);
  ASSERT_TRUE(WaitUntil([&] { return counts.returned == 3; }));
  EXPECT_EQ(counts.handed, 3);
  EXPECT_EQ(counts.leads, 0) << "nobody reads when the notice carried the response";
  internal::SettleNotice key_only;
  key_only.scope_digest = "key-only";
  waiters.NotifySettled(key_only);
  ASSERT_TRUE(WaitUntil([&] { return counts.returned == 6; }));
  EXPECT_EQ(counts.handed, 3);
  EXPECT_EQ(counts.leads, 1) << "one waiter reads for the others";
}

TEST(KeyWaitersTest, NoMoreThanMaxWaitersAndASlotLeftIsFreeAgain) {
  KeyWaiters waiters(2);
  Loop loop(1);
  auto one = waiters.Enter("k", loop.io.get_executor());
  auto two = waiters.Enter("k", loop.io.get_executor());
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(waiters.Enter("other", loop.io.get_executor()), nullptr);
  one.reset();
  EXPECT_EQ(waiters.waiting(), 1u);
  EXPECT_NE(waiters.Enter("other", loop.io.get_executor()), nullptr);
  EXPECT_EQ(KeyWaiters(0).Enter("k", loop.io.get_executor()), nullptr);
}

TEST(KeyWaitersTest, AWaiterNotifiedBeforeItWaitsReturnsAtOnce) {
  KeyWaiters waiters(10);
  Loop loop(2);
  std::atomic<bool> entered{false}, returned{false}, go{false};
  auto strand = asio::make_strand(loop.io);
  asio::co_spawn(
      strand,
      [&]() -> Task<void> {
        auto slot = waiters.Enter("k", co_await asio::this_coro::executor);
        entered = true;
        // Let the notification land before the wait starts (it is posted to this strand).
        asio::steady_timer pause(co_await asio::this_coro::executor);
        while (!go) {
          pause.expires_after(1ms);
          co_await pause.async_wait(asio::use_awaitable);
        }
        co_await slot->Wait(SteadyClock::now() + 60s);
        returned = true;
      },
      asio::detached);
  ASSERT_TRUE(WaitUntil([&] { return entered.load(); }));
  waiters.Notify("k");
  go = true;
  EXPECT_TRUE(WaitUntil([&] { return returned.load(); }, 5s));
}

// Many waiters entering, waiting briefly and leaving on four threads while two other threads
// notify random keys and the test shuts down mid-way: every waiter that entered returns, and
// ThreadSanitizer (tsan stage) sees no race.
TEST(KeyWaitersTest, ConcurrentEnterWaitNotifyAndShutdown) {
  constexpr int kWaiters = 400;
  Counts counts;
  {
    KeyWaiters waiters(kWaiters);
    Loop loop(4);
    std::atomic<bool> stop{false};
    std::vector<std::thread> notifiers;
    for (int n = 0; n < 2; ++n) {
      notifiers.emplace_back([&, n] {
        std::mt19937 rng(n);
        while (!stop) waiters.Notify("key-" + std::to_string(rng() % 8));
      });
    }
    auto spawn = [&](int from, int to) {
      for (int i = from; i < to; ++i) {
        SpawnWaiter(loop, waiters, "key-" + std::to_string(i % 8),
                    SteadyClock::now() + std::chrono::milliseconds(i % 50), counts);
      }
    };
    spawn(0, kWaiters / 2);
    ASSERT_TRUE(WaitUntil([&] { return counts.entered == kWaiters / 2; }));
    spawn(kWaiters / 2, kWaiters * 3 / 4);  // racing the shutdown
    waiters.Shutdown();
    spawn(kWaiters * 3 / 4, kWaiters);      // after it: refused
    ASSERT_TRUE(WaitUntil([&] {
      return counts.entered + counts.refused == kWaiters && counts.woken == counts.entered;
    }));
    stop = true;
    for (auto& t : notifiers) t.join();
    EXPECT_TRUE(WaitUntil([&] { return waiters.waiting() == 0; })) << "every slot was left";
  }
  EXPECT_GT(counts.entered, 0);
  EXPECT_GT(counts.refused, 0) << "waiters that came after the shutdown were refused";
}

}  // namespace
}  // namespace idem::gateway
