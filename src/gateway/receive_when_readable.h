// AsyncReceiveWhenReadable: a receive on a TCP socket that does not try the socket at once but
// waits for epoll to report it readable, for a read whose data cannot be there yet (the answer
// to a request this thread has just sent).
//
// Asio's epoll reactor tries a receive as soon as it starts (a "speculative" recv) and waits for
// readiness only if that finds nothing; it skips the try only after a receive saw the end of the
// stream. The read of an upstream's answer, started right after the request was sent, therefore
// pays a recv that returns EAGAIN almost every time. Waiting with socket::async_wait instead
// costs the same in another call: the reactor re-arms the descriptor (epoll_ctl) for a wait, so
// that readiness it reported earlier is reported again. This operation is Asio's receive with
// the try left out: queued at once, performed when epoll reports the socket readable, and from
// then on exactly like async_receive (partial reads, end of stream, errors, cancellation).
//
// Precondition, the caller's to keep: since the caller last saw the socket empty (a recv that
// returned EAGAIN, or a poll that found nothing to read, as the upstream pool's probe does),
// this thread has not returned to the event loop. Whatever arrived after that look is then
// still to be reported by epoll, and the receive gets it. Readiness that epoll reported while
// no receive was queued is not reported again: a receive started after such a report would
// wait for data that may never come (until its deadline).
//
// Built on the internals of Asio 1.26 (Boost 1.81, Debian 12), its epoll reactor's start_op and
// reactor_op: another version or reactor fails to compile here, to be checked before use.
#pragma once

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/detail/bind_handler.hpp>
#include <boost/asio/detail/buffer_sequence_adapter.hpp>
#include <boost/asio/detail/fenced_block.hpp>
#include <boost/asio/detail/handler_alloc_helpers.hpp>
#include <boost/asio/detail/handler_cont_helpers.hpp>
#include <boost/asio/detail/handler_work.hpp>
#include <boost/asio/detail/reactor.hpp>
#include <boost/asio/detail/reactor_op.hpp>
#include <boost/asio/detail/socket_ops.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/version.hpp>
#include <utility>

#if BOOST_ASIO_VERSION != 102600 || !defined(BOOST_ASIO_HAS_EPOLL) || \
    defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT)
#error "AsyncReceiveWhenReadable is written for Asio 1.26's epoll reactor"
#endif

namespace idem::gateway {
namespace receive_internal {

namespace ad = boost::asio::detail;

// The socket's implementation (descriptor, state, reactor registration), protected in
// basic_socket: named through a class that makes it public.
struct SocketAccess : boost::asio::ip::tcp::socket {
  using boost::asio::ip::tcp::socket::impl_;
};

// The operation the reactor starts on this thread now: its try at start is skipped.
inline thread_local const ad::reactor_op* starting = nullptr;

template <typename Buffers, typename Handler, typename IoExecutor>
class ReceiveWhenReadableOp : public ad::reactor_op {
 public:
  BOOST_ASIO_DEFINE_HANDLER_PTR(ReceiveWhenReadableOp);

  ReceiveWhenReadableOp(ad::socket_type socket, const Buffers& buffers, Handler& handler,
                        const IoExecutor& io_ex)
      : ad::reactor_op(boost::system::error_code(), &ReceiveWhenReadableOp::Perform,
                       &ReceiveWhenReadableOp::Complete),
        socket_(socket),
        buffers_(buffers),
        handler_(std::move(handler)),
        work_(handler_, io_ex) {}

  // As Asio's receive performs, except the try the reactor makes as the operation starts.
  static status Perform(ad::reactor_op* base) {
    if (base == starting) return not_done;
    auto* o = static_cast<ReceiveWhenReadableOp*>(base);
    using Adapter = ad::buffer_sequence_adapter<boost::asio::mutable_buffer, Buffers>;
    bool finished;
    if constexpr (Adapter::is_single_buffer) {  // recv, not recvmsg, as Asio's receive
      const boost::asio::mutable_buffer b = Adapter::first(o->buffers_);
      finished =
          ad::socket_ops::non_blocking_recv1(o->socket_, b.data(), b.size(), 0,
                                             /*is_stream=*/true, o->ec_, o->bytes_transferred_);
    } else {
      Adapter bufs(o->buffers_);
      finished =
          ad::socket_ops::non_blocking_recv(o->socket_, bufs.buffers(), bufs.count(), 0,
                                            /*is_stream=*/true, o->ec_, o->bytes_transferred_);
    }
    if (!finished) return not_done;
    return o->bytes_transferred_ == 0 ? done_and_exhausted : done;  // end of stream or error
  }

  // As Asio's receive completes: the handler is moved out and the operation freed before the
  // call, through the handler's executor.
  static void Complete(void* owner, ad::operation* base, const boost::system::error_code&,
                       std::size_t) {
    auto* o = static_cast<ReceiveWhenReadableOp*>(base);
    ptr p = {std::addressof(o->handler_), o, o};
    ad::handler_work<Handler, IoExecutor> w(std::move(o->work_));
    ad::binder2<Handler, boost::system::error_code, std::size_t> handler(o->handler_, o->ec_,
                                                                         o->bytes_transferred_);
    p.h = std::addressof(handler.handler_);
    p.reset();
    if (owner) {
      ad::fenced_block b(ad::fenced_block::half);
      w.complete(handler, handler.handler_);
    }
  }

 private:
  ad::socket_type socket_;
  Buffers buffers_;
  Handler handler_;
  ad::handler_work<Handler, IoExecutor> work_;
};

// Cancels the queued operation when the handler's cancellation slot is signalled, as Asio's own
// socket operations do.
class Cancellation {
 public:
  Cancellation(ad::reactor* reactor, ad::reactor::per_descriptor_data* data, int descriptor)
      : reactor_(reactor), data_(data), descriptor_(descriptor) {}
  void operator()(boost::asio::cancellation_type_t type) {
    if (!!(type &
           (boost::asio::cancellation_type::terminal | boost::asio::cancellation_type::partial |
            boost::asio::cancellation_type::total))) {
      reactor_->cancel_ops_by_key(descriptor_, *data_, ad::reactor::read_op, this);
    }
  }

 private:
  ad::reactor* reactor_;
  ad::reactor::per_descriptor_data* data_;
  int descriptor_;
};

}  // namespace receive_internal

// The reactor behind one socket's operations, looked up at the first receive (use_service takes
// a lock): kept beside the socket, for as long as the socket lives.
class ReactorCache {
 public:
  receive_internal::ad::reactor& For(boost::asio::ip::tcp::socket& socket) {
    if (reactor_ == nullptr) {
      reactor_ = &boost::asio::use_service<receive_internal::ad::reactor>(
          boost::asio::query(socket.get_executor(), boost::asio::execution::context));
    }
    return *reactor_;
  }

 private:
  receive_internal::ad::reactor* reactor_ = nullptr;
};

// Receives into `buffers` (at least one byte, or an error; end of stream is asio::error::eof)
// once epoll reports `socket` readable, then calls `handler(error_code, bytes)` as
// socket.async_read_some would. `reactor_cache` is kept beside `socket`. See the precondition
// above.
template <typename Buffers, typename Handler>
void AsyncReceiveWhenReadable(boost::asio::ip::tcp::socket& socket, ReactorCache& reactor_cache,
                              const Buffers& buffers, Handler handler) {
  namespace ad = receive_internal::ad;
  auto& object = socket.*(&receive_internal::SocketAccess::impl_);
  auto& impl = object.get_implementation();
  ad::reactor& reactor = reactor_cache.For(socket);
  const bool is_continuation = boost_asio_handler_cont_helpers::is_continuation(handler);
  auto slot = boost::asio::get_associated_cancellation_slot(handler);

  using Op =
      receive_internal::ReceiveWhenReadableOp<Buffers, Handler, decltype(object.get_executor())>;
  typename Op::ptr p = {std::addressof(handler), Op::ptr::allocate(handler), nullptr};
  p.p = new (p.v) Op(impl.socket_, buffers, handler, object.get_executor());
  if (slot.is_connected()) {
    p.p->cancellation_key_ = &slot.template emplace<receive_internal::Cancellation>(
        &reactor, &impl.reactor_data_, impl.socket_);
  }
  if (boost::asio::buffer_size(buffers) == 0) {  // as Asio: nothing to receive completes at once
    reactor.post_immediate_completion(p.p, is_continuation);
  } else if ((impl.state_ & ad::socket_ops::non_blocking) ||
             ad::socket_ops::set_internal_non_blocking(impl.socket_, impl.state_, true, p.p->ec_)) {
    receive_internal::starting = p.p;
    reactor.start_op(ad::reactor::read_op, impl.socket_, impl.reactor_data_, p.p, is_continuation,
                     /*allow_speculative=*/true);
    receive_internal::starting = nullptr;
  } else {
    reactor.post_immediate_completion(p.p, is_continuation);
  }
  p.v = p.p = nullptr;
}

}  // namespace idem::gateway
