// A small HTTP listener for a daemon's admin endpoints (admin_routes.h): Boost.Beast, keep-alive,
// each request to read or response to write bounded by 30 s, requests up to 1 MiB.
//
// Thread safety: Start and Stop from one thread. The routes' callbacks run on the listener's
// executor: the caller's (Start) or a thread of the server's own (StartOnOwnThread).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <memory>
#include <string>

#include "admin/admin_routes.h"
#include "idem/status.h"

namespace idem::admin {

class AdminServer {
 public:
  // Binds `address` ("127.0.0.1:9090"; port 0 picks one, see ParseListenAddress) and serves
  // `routes` on `executor`, which the caller runs, until Stop or destruction.
  // kInvalidArgument for a malformed address, kUnavailable when it cannot bind.
  static Result<std::unique_ptr<AdminServer>> Start(boost::asio::any_io_executor executor,
                                                    const std::string& address,
                                                    AdminRoutes routes);
  // As Start, on a thread the server runs itself: for a daemon with no event loop.
  static Result<std::unique_ptr<AdminServer>> StartOnOwnThread(const std::string& address,
                                                               AdminRoutes routes);
  // Stops (see Stop).
  virtual ~AdminServer() = default;

  // The endpoint actually bound, and the same as "HOST:PORT".
  virtual boost::asio::ip::tcp::endpoint endpoint() const = 0;
  virtual std::string address() const = 0;
  // Stops accepting. With its own thread, also ends the exchanges in progress and joins it;
  // on the caller's executor, they end as the caller's event loop stops. A request in progress
  // keeps the routes alive until it is answered.
  virtual void Stop() = 0;
};

}  // namespace idem::admin
