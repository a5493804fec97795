// StoreExecutor: how a non-blocking caller (an Asio event loop) uses a blocking Store.
//
// Store methods block (store.h). StoreExecutor runs them on a small, bounded pool of its own
// threads and completes the caller's Asio completion token — a callback, `use_awaitable`, a
// future — on the executor associated with that token, so the event loop never waits on disk or
// network. When more than `max_pending` calls are queued or running, a new call completes at once
// with kResourceExhausted instead of queueing without bound: the gateway turns that into 503 with
// Retry-After, which is the backpressure a saturated store needs.
//
// Size the pool to the store: one or two threads for SQLite (writes serialise anyway), the
// connection-pool size for Redis or PostgreSQL, so every pool thread can hold a connection.
//
// A store that NeverBlocks() (an execution hook, store_execution.h: the memory store) has its
// per-request calls (AsyncBegin, AsyncComplete, AsyncRelease, AsyncGet, AsyncPurge) run on the
// calling thread instead; the completion is still posted, never invoked from inside the
// initiating call.
//
// A call handed to the pool always runs to the end, even if the caller has gone away (a client
// disconnected): a Complete must never be cancelled halfway, because that client is exactly the
// one who will retry.
//
// Thread safety: all methods may be called from any thread. The destructor waits for queued
// calls, and submitted writes still in the store's queue, to finish and post their completions.
// REQUIRES: the store, and every execution context a completion is posted to (the caller's
// io_context), outlive the StoreExecutor: destroy the executor first. A pool thread may still be
// returning from a post to the caller's context just after the caller's handler ran.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "idem/store.h"
#include "store/store_execution.h"

namespace idem {

class StoreExecutor {
 public:
  struct Options {
    // Threads running store calls. Default 4.
    int threads = 4;
    // Calls queued or running at once before new ones are refused. Default 4096.
    int max_pending = 4096;
  };

  StoreExecutor(Store& store, Options options);
  ~StoreExecutor();

  StoreExecutor(const StoreExecutor&) = delete;
  StoreExecutor& operator=(const StoreExecutor&) = delete;

  Store& store() const { return store_; }
  // What the executor knows of the store beyond Store (internal::HooksOf).
  internal::ExecutionHooks& hooks() const { return hooks_; }
  // The store's own write queue (WriteQueueOf), or null.
  internal::WriteQueue* write_queue() const { return write_queue_; }
  // The store's own shared replays (SharedReplaysOf), or null.
  internal::SharedReplays* shared_replays() const { return shared_replays_; }
  // Calls queued or running now.
  int pending() const { return pending_.load(std::memory_order_relaxed); }

  // Runs `fn(store)` on the pool and completes `token` with its result, a Result<T>, as
  // `void(Result<T>)`. The completion runs on the token's associated executor.
  template <typename Fn, typename CompletionToken>
  auto Run(Fn fn, CompletionToken&& token) {
    return Initiate(std::move(fn), /*may_run_inline=*/false,
                    std::forward<CompletionToken>(token));
  }

  // Begin, Complete and Release go through the store's write queue when it has one
  // (internal::WriteQueueOf): the pool thread is given back once the write is queued, and a
  // queue whose Submit calls never block (SubmitsWithoutBlocking) has them called on the
  // caller's thread, with no hand-off to the pool; its own thread completes them. Any other
  // store runs the blocking call on the pool, as Run does.
  template <typename CompletionToken>
  auto AsyncBegin(Scope scope, Fingerprint fingerprint, Duration lease, CompletionToken&& token) {
    return RunWriteCall(BeginCall{std::move(scope), fingerprint, lease},
                        std::forward<CompletionToken>(token));
  }

  template <typename CompletionToken>
  auto AsyncComplete(Scope scope, FencingToken fencing_token, StoredResponse response,
                     Duration ttl, CompletionToken&& token) {
    return RunWriteCall(CompleteCall{std::move(scope), fencing_token, std::move(response), ttl},
                        std::forward<CompletionToken>(token));
  }

  template <typename CompletionToken>
  auto AsyncRelease(Scope scope, FencingToken fencing_token, CompletionToken&& token) {
    return RunWriteCall(ReleaseCall{std::move(scope), fencing_token},
                        std::forward<CompletionToken>(token));
  }

  // Accept is rare (once per long-running operation), so it is a plain call, inline when the
  // store never blocks.
  template <typename CompletionToken>
  auto AsyncAccept(Scope scope, FencingToken fencing_token, StoredResponse accepted,
                   Duration lease, CompletionToken&& token) {
    return RunRequestCall(
        [scope = std::move(scope), fencing_token, accepted = std::move(accepted),
         lease](Store& s) { return s.Accept(scope, fencing_token, accepted, lease); },
        std::forward<CompletionToken>(token));
  }

  template <typename CompletionToken>
  auto AsyncGet(Scope scope, CompletionToken&& token) {
    return RunRequestCall([scope = std::move(scope)](Store& s) { return s.Get(scope); },
                          std::forward<CompletionToken>(token));
  }

  template <typename CompletionToken>
  auto AsyncPurge(Scope scope, CompletionToken&& token) {
    return RunRequestCall([scope = std::move(scope)](Store& s) { return s.Purge(scope); },
                          std::forward<CompletionToken>(token));
  }

 private:
  // A per-request call: inline when the store never blocks, else on the pool.
  template <typename Fn, typename CompletionToken>
  auto RunRequestCall(Fn fn, CompletionToken&& token) {
    return Initiate(std::move(fn), hooks_.NeverBlocks(), std::forward<CompletionToken>(token));
  }

  // The three write calls, each in both forms: Run blocks, Submit hands `done` the result.
  template <typename T>
  using Done = internal::WriteQueue::Done<T>;
  struct BeginCall {
    using Result = idem::Result<BeginOutcome>;
    Scope scope;
    Fingerprint fingerprint;
    Duration lease;
    Result Run(Store& s) const { return s.Begin(scope, fingerprint, lease); }
    void Submit(internal::WriteQueue& q, Done<BeginOutcome> done) const {
      q.SubmitBegin(scope, fingerprint, lease, std::move(done));
    }
  };
  struct CompleteCall {
    using Result = idem::Result<CompleteOutcome>;
    Scope scope;
    FencingToken token;
    StoredResponse response;
    Duration ttl;
    Result Run(Store& s) const { return s.Complete(scope, token, response, ttl); }
    void Submit(internal::WriteQueue& q, Done<CompleteOutcome> done) const {
      q.SubmitComplete(scope, token, response, ttl, std::move(done));
    }
  };
  struct ReleaseCall {
    using Result = idem::Result<ReleaseOutcome>;
    Scope scope;
    FencingToken token;
    Result Run(Store& s) const { return s.Release(scope, token); }
    void Submit(internal::WriteQueue& q, Done<ReleaseOutcome> done) const {
      q.SubmitRelease(scope, token, std::move(done));
    }
  };

  // A write call: run inline when the store never blocks, else queued (from the pool or the
  // caller's thread) when the store has a write queue, else run on the pool.
  template <typename Call, typename CompletionToken>
  auto RunWriteCall(Call call, CompletionToken&& token) {
    using R = typename Call::Result;
    return boost::asio::async_initiate<CompletionToken, void(R)>(
        [this](auto handler, Call c) {
          const bool inline_call = hooks_.NeverBlocks();
          if (!inline_call && write_queue_ != nullptr) {
            this->StartSubmitted(std::move(c), std::move(handler),
                                 /*on_caller_thread=*/write_queue_->SubmitsWithoutBlocking());
            return;
          }
          this->Start([c = std::move(c)](Store& s) { return c.Run(s); }, std::move(handler),
                      /*may_run_inline=*/inline_call);
        },
        token, std::move(call));
  }

  template <typename Fn, typename CompletionToken>
  auto Initiate(Fn fn, bool may_run_inline, CompletionToken&& token) {
    using R = std::invoke_result_t<Fn&, Store&>;
    return boost::asio::async_initiate<CompletionToken, void(R)>(
        [this, may_run_inline](auto handler, Fn f) {
          this->Start(std::move(f), std::move(handler), may_run_inline);
        },
        token, std::move(fn));
  }

  template <typename Fn, typename Handler>
  void Start(Fn fn, Handler handler, bool may_run_inline) {
    using R = std::invoke_result_t<Fn&, Store&>;
    auto work = boost::asio::make_work_guard(boost::asio::get_associated_executor(handler));
    if (may_run_inline) {
      R result = fn(store_);
      Finish(std::move(work), std::move(handler), std::move(result));
      return;
    }
    if (!AdmitPending()) {
      Finish(std::move(work), std::move(handler), R(SaturatedError()));
      return;
    }
    boost::asio::post(pool_, [this, fn = std::move(fn), handler = std::move(handler),
                              work = std::move(work)]() mutable {
      R result = fn(store_);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
      Finish(std::move(work), std::move(handler), std::move(result));
    });
  }

  // Like Start's pool path, for a Submit call: the call is pending until `done` runs, which
  // may be after the pool thread has gone on to other work. With `on_caller_thread` the call
  // is submitted right here instead (the store's Submit never blocks).
  template <typename Call, typename Handler>
  void StartSubmitted(Call call, Handler handler, bool on_caller_thread) {
    using R = typename Call::Result;
    auto work = boost::asio::make_work_guard(boost::asio::get_associated_executor(handler));
    if (!AdmitPending()) {
      Finish(std::move(work), std::move(handler), R(SaturatedError()));
      return;
    }
    // std::function needs a copyable callable; the handler is move-only.
    struct Waiting {
      Handler handler;
      decltype(work) guard;
    };
    auto waiting = std::make_shared<Waiting>(Waiting{std::move(handler), std::move(work)});
    auto submit = [this, call = std::move(call), waiting]() mutable {
      call.Submit(*write_queue_, [this, waiting](R result) {
        // `done` may run on a thread of the store's, which the destructor does not join: the
        // post to the caller's context is finished before pending_ lets the destructor return,
        // so the context (destroyed after this object) is never touched afterwards. Nothing of
        // `this` is used after the decrement.
        Finish(std::move(waiting->guard), std::move(waiting->handler), std::move(result));
        pending_.fetch_sub(1, std::memory_order_acq_rel);
      });
    };
    if (on_caller_thread) {
      submit();
    } else {
      boost::asio::post(pool_, std::move(submit));
    }
  }

  // Counts one more pending call and returns true; when max_pending_ calls are pending
  // already, counts nothing and returns false (the call is then refused with SaturatedError).
  bool AdmitPending() {
    if (pending_.fetch_add(1, std::memory_order_acq_rel) < max_pending_) return true;
    pending_.fetch_sub(1, std::memory_order_acq_rel);
    return false;
  }

  Status SaturatedError() const {
    return ResourceExhaustedError("store executor saturated: " + std::to_string(max_pending_) +
                                  " calls pending");
  }

  template <typename Work, typename Handler, typename R>
  static void Finish(Work work, Handler handler, R result) {
    auto ex = work.get_executor();
    boost::asio::post(ex, [handler = std::move(handler), result = std::move(result),
                           work = std::move(work)]() mutable {
      std::move(handler)(std::move(result));
    });
  }

  Store& store_;
  internal::ExecutionHooks& hooks_;
  internal::WriteQueue* const write_queue_;  // null: writes block a pool thread each
  internal::SharedReplays* const shared_replays_;  // null: replays are copied
  const int max_pending_;
  std::atomic<int> pending_{0};
  boost::asio::thread_pool pool_;
};

}  // namespace idem
