// SocketHangup: flow::ClientHangup over a client's TCP socket. While a request waits for a key
// in flight nothing reads the connection, so a client that gives up would otherwise hold its
// wait slot until the deadline. The watch is one async_wait for readability; when it fires, a
// non-consuming peek tells a hang-up (end of stream, or a reset) from a pipelined request.
//
// Thread safety: use from the connection's event loop only (the session's coroutine).
#pragma once

#include <boost/asio/ip/tcp.hpp>

#include <memory>

#include "gateway/flow/wait.h"

namespace idem::gateway {

class SocketHangup final : public flow::ClientHangup {
 public:
  // REQUIRES: `socket` outlives this object, and has no other wait or read pending while a
  // watch is on (Stop cancels every operation on the socket).
  explicit SocketHangup(asio::ip::tcp::socket& socket) : socket_(socket) {}
  ~SocketHangup() override { Stop(); }
  SocketHangup(const SocketHangup&) = delete;
  SocketHangup& operator=(const SocketHangup&) = delete;

  void Watch(std::function<void()> on_hangup) override;
  void Stop() override;

 private:
  asio::ip::tcp::socket& socket_;
  // Shared with the pending wait's handler, which runs after Stop (cancelled) and must then
  // touch neither the socket nor this object.
  std::shared_ptr<bool> watching_;
};

}  // namespace idem::gateway
