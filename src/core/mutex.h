// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with clang's
// thread-safety annotations, so a build with -Wthread-safety checks that every field marked
// IDEM_GUARDED_BY(mu) is only touched with `mu` held.
//
// libstdc++'s std::mutex carries no annotations, so the analysis cannot see it being locked;
// these thin wrappers add them and nothing else (same cost, same behaviour). The annotations are
// attributes only clang understands; with any other compiler the macros expand to nothing.
//
//   class Counter {
//    public:
//     void Add() IDEM_EXCLUDES(mu_) { MutexLock lock(mu_); ++n_; }
//    private:
//     Mutex mu_;
//     int n_ IDEM_GUARDED_BY(mu_) = 0;
//   };
//
// Waiting: CondVar has no predicate overloads, because the analysis checks a lambda as a
// separate function that holds no lock. Write the loop out where the lock is visibly held:
//   while (!ready_) cv_.Wait(lock);
//   while (!ready_ && cv_.WaitUntil(lock, deadline)) {}
//
// Thread safety: Mutex and CondVar are safe to use from many threads (that is their job); a
// MutexLock belongs to the thread that made it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define IDEM_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define IDEM_THREAD_ANNOTATION(x)
#endif

// A class that is a lock (Mutex). The argument names the kind in diagnostics.
#define IDEM_CAPABILITY(name) IDEM_THREAD_ANNOTATION(capability(name))
// A class that holds a lock for its lifetime (MutexLock).
#define IDEM_SCOPED_CAPABILITY IDEM_THREAD_ANNOTATION(scoped_lockable)
// A field read or written only with the given mutex held.
#define IDEM_GUARDED_BY(mu) IDEM_THREAD_ANNOTATION(guarded_by(mu))
// A pointer whose pointee is read or written only with the given mutex held.
#define IDEM_PT_GUARDED_BY(mu) IDEM_THREAD_ANNOTATION(pt_guarded_by(mu))
// A function the caller must call with the given mutexes held.
#define IDEM_REQUIRES(...) IDEM_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// A function that locks the given mutexes (or `this`) and returns with them held.
#define IDEM_ACQUIRE(...) IDEM_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
// A function that unlocks the given mutexes (or `this`).
#define IDEM_RELEASE(...) IDEM_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
// A function that tries to lock; returns `result` when it did.
#define IDEM_TRY_ACQUIRE(...) IDEM_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// A function the caller must call without the given mutexes held (it locks them itself).
#define IDEM_EXCLUDES(...) IDEM_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// A function that checks (or simply promises) that the mutex is held when it returns.
#define IDEM_ASSERT_CAPABILITY(x) IDEM_THREAD_ANNOTATION(assert_capability(x))
// Turns the analysis off for one function; say why beside it.
#define IDEM_NO_THREAD_SAFETY_ANALYSIS IDEM_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace idem {

class CondVar;

// A std::mutex the analysis can see. Not recursive.
class IDEM_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() IDEM_ACQUIRE() { mu_.lock(); }
  void Unlock() IDEM_RELEASE() { mu_.unlock(); }
  bool TryLock() IDEM_TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // Tells the analysis the mutex is held here when it cannot see it (a callback the caller
  // runs under the lock). Checks nothing at run time.
  void AssertHeld() const IDEM_ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction (std::unique_lock underneath). Unlock() and
// Lock() let go of it for a stretch and take it back; the destructor unlocks only if held.
class IDEM_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) IDEM_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() IDEM_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() IDEM_RELEASE() { lock_.unlock(); }
  void Lock() IDEM_ACQUIRE() { lock_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// A std::condition_variable that waits on a MutexLock. Each Wait unlocks, sleeps and relocks
// before returning (the analysis sees the lock held throughout, which is what the caller sees).
// Wakeups may be spurious: always wait in a loop on the condition.
class CondVar {
 public:
  void Wait(MutexLock& lock) { cv_.wait(lock.lock_); }
  // False once `deadline` has passed (the caller should check its condition one last time).
  template <class Clock, class Dur>
  bool WaitUntil(MutexLock& lock, std::chrono::time_point<Clock, Dur> deadline) {
    return cv_.wait_until(lock.lock_, deadline) == std::cv_status::no_timeout;
  }
  void NotifyOne() noexcept { cv_.notify_one(); }
  void NotifyAll() noexcept { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace idem
