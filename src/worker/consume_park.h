// ParkedCoroutine: where one long-lived coroutine of `idem consume`'s event loop waits for its
// next piece of work, without an allocation per wait. The coroutine awaits Wait(); whoever hands
// it work calls Wake(), which resumes it there and then, on the caller's stack, until it next
// waits: no post, no turn of the loop in between.
//
// The completion handler of the wait is kept in the object itself (a few pointers: asio's
// handler for a coroutine waiting on an operation without a result), not on the heap; its type
// is erased with two function pointers.
//
// Thread safety: none; the event loop's thread uses an instance. Destroying an instance that
// holds a waiting coroutine destroys that coroutine (through its executor, as asio does for a
// handler never called).
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/deferred.hpp>

#include <cstddef>
#include <new>
#include <utility>

namespace idem::worker {

class ParkedCoroutine {
 public:
  ParkedCoroutine() = default;
  ParkedCoroutine(const ParkedCoroutine&) = delete;
  ParkedCoroutine& operator=(const ParkedCoroutine&) = delete;
  ~ParkedCoroutine() {
    if (destroy_ != nullptr) destroy_(storage_);
  }

  // A coroutine is waiting here.
  bool parked() const { return wake_ != nullptr; }

  // `co_await parked.Wait();` in an asio::awaitable: returns once Wake is called.
  // REQUIRES: no coroutine is waiting here already.
  auto Wait() {
    return boost::asio::async_initiate<const boost::asio::deferred_t&, void()>(
        [this](auto handler) { Keep(std::move(handler)); }, boost::asio::deferred);
  }

  // Resumes the waiting coroutine inside this call; it returns once the coroutine waits again
  // (or ends). REQUIRES: parked(); called on the thread running the coroutine's executor, where
  // whatever the coroutine does until its next wait may run.
  void Wake() {
    void (*wake)(void*) = wake_;
    wake_ = nullptr;
    destroy_ = nullptr;
    wake(storage_);
  }

 private:
  static constexpr size_t kStorage = 64;

  template <typename Handler>
  void Keep(Handler handler) {
    static_assert(sizeof(Handler) <= kStorage && alignof(Handler) <= alignof(std::max_align_t),
                  "the waiting coroutine's handler does not fit ParkedCoroutine's storage");
    new (storage_) Handler(std::move(handler));
    wake_ = [](void* p) {
      Handler* kept = std::launder(static_cast<Handler*>(p));
      Handler h(std::move(*kept));
      kept->~Handler();
      std::move(h)();
    };
    destroy_ = [](void* p) { std::launder(static_cast<Handler*>(p))->~Handler(); };
  }

  alignas(std::max_align_t) unsigned char storage_[kStorage];
  void (*wake_)(void*) = nullptr;
  void (*destroy_)(void*) = nullptr;
};

}  // namespace idem::worker
