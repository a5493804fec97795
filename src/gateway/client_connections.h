// How many client connections each client address holds, so that one address cannot take every
// connection slot (max_connections_per_client): a client that opens thousands of idle
// connections is refused beyond its share while other clients still get in.
//
//   auto hold = connections.Open(address);   // nullopt: that address is at its limit
//   ...the session runs; destroying `hold` gives the slot back
//
// The client address is the TCP peer's IP address; behind a proxy or a load balancer every
// connection comes from its address (docs/gateway.md says how to size the limit then).
//
// Thread safety: Open and Hold's destructor may run on any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include <boost/asio/ip/address.hpp>

#include "core/mutex.h"

namespace idem::gateway {

class ClientConnections {
 public:
  // `limit`: the most connections one address may hold; 0 means no limit.
  explicit ClientConnections(size_t limit) : limit_(limit) {}
  ClientConnections(const ClientConnections&) = delete;
  ClientConnections& operator=(const ClientConnections&) = delete;

  // One connection counted against its address until destroyed (or moved from). Movable, not
  // copyable.
  class Hold {
   public:
    Hold(Hold&& other) noexcept : owner_(other.owner_), key_(std::move(other.key_)) {
      other.owner_ = nullptr;
    }
    Hold& operator=(Hold&& other) noexcept {
      if (this != &other) {
        if (owner_ != nullptr) owner_->Close(key_);
        owner_ = other.owner_;
        key_ = std::move(other.key_);
        other.owner_ = nullptr;
      }
      return *this;
    }
    ~Hold() {
      if (owner_ != nullptr) owner_->Close(key_);
    }

   private:
    friend class ClientConnections;
    Hold(ClientConnections* owner, std::string key) : owner_(owner), key_(std::move(key)) {}
    ClientConnections* owner_;
    std::string key_;
  };

  // Counts a new connection from `address`; nullopt (nothing counted) when the address already
  // holds `limit` connections.
  std::optional<Hold> Open(const boost::asio::ip::address& address) IDEM_EXCLUDES(mu_);

  size_t limit() const { return limit_; }
  // How many connections `address` holds now.
  size_t held(const boost::asio::ip::address& address) const IDEM_EXCLUDES(mu_);
  // How many addresses hold at least one connection now.
  size_t addresses() const IDEM_EXCLUDES(mu_);

 private:
  static std::string Key(const boost::asio::ip::address& address);
  void Close(const std::string& key) IDEM_EXCLUDES(mu_);

  const size_t limit_;
  mutable Mutex mu_;
  std::unordered_map<std::string, uint32_t> held_ IDEM_GUARDED_BY(mu_);
};

}  // namespace idem::gateway
