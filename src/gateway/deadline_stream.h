// DeadlineStream: a TCP socket whose reads, writes and connect share one deadline,
// watched by one timer per connection. beast::tcp_stream arms a timer before each operation and
// cancels it after, which on Linux often costs a timerfd_settime call and a cancelled handler to
// run per operation. Here setting the deadline is a store; the watchdog timer is armed only when
// an operation starts and no wait is pending that ends at or before the deadline. When it fires
// it looks at the deadline as it is then: passed with an operation pending, the socket is closed
// and the pending operations complete with beast::error::timeout (as tcp_stream's do); not
// passed, it waits again, for the deadline; no operation pending, it stops until the next one.
// A deadline counts only while an operation is pending, as with tcp_stream: one that passes
// between operations times out the next operation at once.
//
// Thread safety: like a socket: one thread at a time (the connection's event loop).
#pragma once

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>

#include "core/coarse_clock.h"
#include "gateway/http.h"
#include "gateway/receive_when_readable.h"

namespace idem::gateway {

class DeadlineStream {
 public:
  // Deadlines are seconds long and set for every operation: they are read from the coarse
  // clock, precise enough and a fraction of the precise one's cost. The watchdog waits on
  // steady_clock (CoarseClock::ToSteady), and looks at the precise time when it wakes.
  using Clock = internal::CoarseClock;
  using executor_type = tcp::socket::executor_type;

  explicit DeadlineStream(tcp::socket socket);
  explicit DeadlineStream(const executor_type& executor);
  // Closes the socket: operations still pending complete with operation_aborted (each keeps the
  // state it counts itself done on until then, as beast::tcp_stream's do); a watchdog wait still
  // queued then finds nothing to look at.
  ~DeadlineStream();
  DeadlineStream(const DeadlineStream&) = delete;
  DeadlineStream& operator=(const DeadlineStream&) = delete;

  executor_type get_executor() noexcept { return state_->socket.get_executor(); }
  tcp::socket& socket() { return state_->socket; }

  // The deadline of the operations that follow, until it is set again: `d` from now, late by
  // up to two ticks of the coarse clock; early only while the kernel's tick is itself late, by
  // that delay (CoarseClock).
  void expires_after(Clock::duration d) {
    state_->deadline = Clock::now() + Clock::tick() + d;
  }
  void expires_never() { state_->deadline = Clock::time_point::max(); }

  // The next read waits for the socket to be reported readable instead of trying it first
  // (AsyncReceiveWhenReadable, whose precondition the caller keeps); later reads try first.
  void ReadNextWhenReadable() { state_->next_read_when_readable = true; }

  // AsyncReadStream and AsyncWriteStream, for Asio's and Beast's composed operations.
  template <typename Buffers, typename Token>
  auto async_read_some(const Buffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(boost::system::error_code, size_t)>(
        [this](auto handler, const Buffers& b) {
          state_->Started();
          if (state_->next_read_when_readable) {
            state_->next_read_when_readable = false;
            AsyncReceiveWhenReadable(state_->socket, state_->reactor, b,
                                     Timed<decltype(handler)>{state_, std::move(handler)});
          } else {
            state_->socket.async_read_some(b, Timed<decltype(handler)>{state_, std::move(handler)});
          }
        },
        token, buffers);
  }
  template <typename Buffers, typename Token>
  auto async_write_some(const Buffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(boost::system::error_code, size_t)>(
        [this](auto handler, const Buffers& b) {
          state_->Started();
          state_->socket.async_write_some(b, Timed<decltype(handler)>{state_, std::move(handler)});
        },
        token, buffers);
  }
  // Connects to the first of `endpoints` that accepts (asio::async_connect).
  template <typename Endpoints, typename Token>
  auto async_connect(const Endpoints& endpoints, Token&& token) {
    return asio::async_initiate<Token, void(boost::system::error_code)>(
        [this](auto handler, const Endpoints& e) {
          state_->Started();
          asio::async_connect(state_->socket, e,
                              Connected<decltype(handler)>{{state_, std::move(handler)}});
        },
        token, endpoints);
  }

 private:
  struct State : std::enable_shared_from_this<State> {
    explicit State(tcp::socket s) : socket(std::move(s)), watchdog(socket.get_executor()) {}
    void Started();
    // Counts the operation done; `ec` becomes beast::error::timeout if the deadline closed it.
    void Finished(boost::system::error_code& ec);
    void Arm(Clock::time_point at);
    void Fired(uint64_t generation, const boost::system::error_code& ec);

    tcp::socket socket;
    asio::steady_timer watchdog;
    Clock::time_point deadline = Clock::time_point::max();
    Clock::time_point armed_until{};  // meaningful while armed
    bool armed = false;
    bool timed_out = false;
    bool next_read_when_readable = false;
    ReactorCache reactor;     // for AsyncReceiveWhenReadable
    int pending = 0;          // operations started and not completed
    uint64_t generation = 0;  // of the watchdog's current wait; older waits are ignored
  };

  // An operation's completion handler: counts the operation done, then calls `handler` with its
  // associated executor, allocator and cancellation slot (the ones it would have had). It shares
  // the state: a stream destroyed with the operation pending leaves the completion, queued as
  // aborted, a state to count itself done on.
  template <typename Handler>
  struct Timed {
    std::shared_ptr<State> state;
    Handler handler;

    using executor_type = asio::associated_executor_t<Handler, tcp::socket::executor_type>;
    executor_type get_executor() const noexcept {
      return asio::get_associated_executor(handler, state->socket.get_executor());
    }
    using allocator_type = asio::associated_allocator_t<Handler>;
    allocator_type get_allocator() const noexcept {
      return asio::get_associated_allocator(handler);
    }
    using cancellation_slot_type = asio::associated_cancellation_slot_t<Handler>;
    cancellation_slot_type get_cancellation_slot() const noexcept {
      return asio::get_associated_cancellation_slot(handler);
    }

    void operator()(boost::system::error_code ec, size_t n) {
      state->Finished(ec);
      std::move(handler)(ec, n);
    }
    void operator()(boost::system::error_code ec) {
      state->Finished(ec);
      std::move(handler)(ec);
    }
  };
  // async_connect's handler also receives the endpoint connected to, which is not passed on.
  template <typename Handler>
  struct Connected : Timed<Handler> {
    void operator()(boost::system::error_code ec, const tcp::endpoint&) {
      Timed<Handler>::operator()(ec);
    }
  };

  std::shared_ptr<State> state_;
};

}  // namespace idem::gateway
