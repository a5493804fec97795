#include "core/mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace idem {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

TEST(MutexTest, MutexLockExcludesOtherThreads) {
  Mutex mu;
  int counter = 0;  // guarded by mu (a local: the analysis cannot annotate it)
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        MutexLock lock(mu);
        ++counter;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, 40000);
}

TEST(MutexTest, UnlockLetsAnotherThreadInAndLockTakesItBack) {
  Mutex mu;
  MutexLock lock(mu);
  lock.Unlock();
  EXPECT_TRUE(mu.TryLock());  // free while unlocked
  mu.Unlock();
  lock.Lock();
  std::atomic<bool> got{true};
  std::thread other([&] { got = mu.TryLock(); });
  other.join();
  EXPECT_FALSE(got.load());  // held again
}  // the destructor unlocks once; a double unlock would abort under the sanitizers

TEST(MutexTest, WaitUntilReturnsFalseAtTheDeadline) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(mu);
  const auto start = steady_clock::now();
  bool notified = true;
  // Spurious wakeups return true early; the deadline must still come.
  while (notified) notified = cv.WaitUntil(lock, start + milliseconds(30));
  EXPECT_GE(steady_clock::now() - start, milliseconds(30));
}

TEST(MutexTest, NotifyAllWakesAWaiterThatSeesTheCondition) {
  Mutex mu;
  CondVar cv;
  bool ready = false;  // guarded by mu
  MutexLock lock(mu);
  // The setter takes mu only once WaitUntil below has released it: the waiter is waiting when
  // it is notified.
  std::thread setter([&] {
    MutexLock setter_lock(mu);
    ready = true;
    cv.NotifyAll();
  });
  const auto deadline = steady_clock::now() + std::chrono::seconds(10);
  while (!ready && cv.WaitUntil(lock, deadline)) {
  }
  EXPECT_TRUE(ready);
  lock.Unlock();
  setter.join();
}

}  // namespace
}  // namespace idem
