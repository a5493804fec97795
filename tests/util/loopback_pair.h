// Two TCP sockets connected to each other on loopback, for tests of what one end sees when the
// other sends, closes or stays quiet.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <utility>

namespace idem::testing {

struct LoopbackPair {
  boost::asio::ip::tcp::socket client;  // the end that connected
  boost::asio::ip::tcp::socket peer;    // the end that accepted
};

// Connects a pair on 127.0.0.1 (a free port), both ends on `io`.
inline LoopbackPair ConnectLoopbackPair(boost::asio::io_context& io) {
  using boost::asio::ip::tcp;
  tcp::acceptor acceptor(io, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket client(io);
  client.connect(acceptor.local_endpoint());
  tcp::socket peer = acceptor.accept();
  return LoopbackPair{std::move(client), std::move(peer)};
}

}  // namespace idem::testing
