#include "gateway/client_connections.h"

namespace idem::gateway {

std::string ClientConnections::Key(const boost::asio::ip::address& address) {
  // The address's bytes; an IPv4 client of a dual-stack listener (::ffff:a.b.c.d) counts as the
  // IPv4 address it is.
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    const auto v4 = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped,
                                                     address.to_v6()).to_bytes();
    return std::string(v4.begin(), v4.end());
  }
  if (address.is_v4()) {
    const auto v4 = address.to_v4().to_bytes();
    return std::string(v4.begin(), v4.end());
  }
  const auto v6 = address.to_v6().to_bytes();
  return std::string(v6.begin(), v6.end());
}

std::optional<ClientConnections::Hold> ClientConnections::Open(
    const boost::asio::ip::address& address) {
  std::string key = Key(address);
  {
    MutexLock lock(mu_);
    uint32_t& n = held_[key];
    if (limit_ > 0 && n >= limit_) {
      if (n == 0) held_.erase(key);
      return std::nullopt;
    }
    ++n;
  }
  return Hold(this, std::move(key));
}

void ClientConnections::Close(const std::string& key) {
  MutexLock lock(mu_);
  auto it = held_.find(key);
  if (it == held_.end()) return;
  if (--it->second == 0) held_.erase(it);
}

size_t ClientConnections::held(const boost::asio::ip::address& address) const {
  const std::string key = Key(address);
  MutexLock lock(mu_);
  auto it = held_.find(key);
  return it == held_.end() ? 0 : it->second;
}

size_t ClientConnections::addresses() const {
  MutexLock lock(mu_);
  return held_.size();
}

}  // namespace idem::gateway
