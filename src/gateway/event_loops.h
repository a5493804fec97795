// EventLoops: the gateway's event-loop threads, one io_context each. A connection is given to one
// loop when it is accepted and stays there: its reads, its writes, its store calls answered on
// the event loop and the upstream connections it borrows (UpstreamPool keeps one idle list per
// loop) all run on that loop's thread. A request then never waits for another thread to wake up
// between its arrival and its response, which on a busy machine costs tens of microseconds per
// hop; threads share only the listeners (on the first loop), the store and the counters.
//
// Thread safety: Next, Stop from any thread; Run and DestroyAbandonedWork from one thread.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <atomic>
#include <memory>
#include <vector>

namespace idem::gateway {

class EventLoops {
 public:
  // REQUIRES: count >= 1.
  explicit EventLoops(int count);
  EventLoops(const EventLoops&) = delete;
  EventLoops& operator=(const EventLoops&) = delete;

  int size() const { return static_cast<int>(loops_.size()); }
  // The loop of the listeners, the signals and the periodic work; Run runs it on its caller.
  boost::asio::io_context& first() { return *loops_.front(); }
  // The loop for a new connection: each in turn.
  boost::asio::io_context& Next();

  // Runs every loop, each on a thread of its own (the first on the calling thread), until Stop;
  // returns once every thread has returned.
  void Run();
  void Stop();

  // Destroys every handler still queued on a loop or waiting on one of its I/O objects (asio
  // would do so in each io_context's destructor, later). Only after Run has returned.
  void DestroyAbandonedWork();

 private:
  // An io_context whose handlers can be destroyed before its destructor runs. One thread runs
  // each: Asio then keeps the handlers a loop queues for itself in a queue of its thread's own.
  class Loop : public boost::asio::io_context {
   public:
    Loop() : boost::asio::io_context(1) {}
    void DestroyAbandonedWork() { shutdown(); }
  };

  std::vector<std::unique_ptr<Loop>> loops_;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> idle_;
  std::atomic<size_t> next_{0};
};

}  // namespace idem::gateway
