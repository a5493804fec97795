#include "gateway/socket_hangup.h"

#include <sys/socket.h>

#include <cerrno>

namespace idem::gateway {

void SocketHangup::Watch(std::function<void()> on_hangup) {
  Stop();
  watching_ = std::make_shared<bool>(true);
  socket_.async_wait(
      asio::ip::tcp::socket::wait_read,
      [&socket = socket_, watching = watching_, on_hangup = std::move(on_hangup)](
          const boost::system::error_code& ec) {
        if (!*watching) return;  // stopped: the socket may be gone
        *watching = false;
        if (ec == asio::error::operation_aborted) return;
        char byte;
        const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        const bool hung_up =
            ec || n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        if (hung_up) on_hangup();
      });
}

void SocketHangup::Stop() {
  if (!watching_ || !*watching_) return;
  *watching_ = false;
  boost::system::error_code ignored;
  socket_.cancel(ignored);
}

}  // namespace idem::gateway
