// ParkedCoroutine: where one long-lived coroutine of `idem consume`'s event loop waits for its
// next piece of work, without an allocation per wait. The coroutine awaits Wait(); whoever hands
// it work calls Wake(), which posts its resumption to the event loop (it never runs inside Wake).
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
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

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

  // Resumes the waiting coroutine on `loop`, the event loop it runs on (posted: one operation
  // of the loop, not the generic path of a handler's own executor). REQUIRES: parked().
  void Wake(const boost::asio::io_context::executor_type& loop) {
    void (*wake)(void*, const boost::asio::io_context::executor_type&) = wake_;
    wake_ = nullptr;
    destroy_ = nullptr;
    wake(storage_, loop);
  }

 private:
  static constexpr size_t kStorage = 64;

  template <typename Handler>
  void Keep(Handler handler) {
    static_assert(sizeof(Handler) <= kStorage && alignof(Handler) <= alignof(std::max_align_t),
                  "the waiting coroutine's handler does not fit ParkedCoroutine's storage");
    new (storage_) Handler(std::move(handler));
    wake_ = [](void* p, const boost::asio::io_context::executor_type& loop) {
      Handler* kept = std::launder(static_cast<Handler*>(p));
      boost::asio::post(loop, [h = std::move(*kept)]() mutable { h(); });
      kept->~Handler();
    };
    destroy_ = [](void* p) { std::launder(static_cast<Handler*>(p))->~Handler(); };
  }

  alignas(std::max_align_t) unsigned char storage_[kStorage];
  void (*wake_)(void*, const boost::asio::io_context::executor_type&) = nullptr;
  void (*destroy_)(void*) = nullptr;
};

}  // namespace idem::worker
