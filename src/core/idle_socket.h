// A look at a socket that sits idle between exchanges (a pooled connection), without waiting:
// one poll(2). Used before a pooled connection is lent, so that one the peer closed while idle
// is replaced before anything is sent on it.
#pragma once

#include <poll.h>

namespace idem::internal {

enum class IdleSocket {
  kQuiet,     // nothing arrived (or the look was interrupted): as it was
  kReadable,  // bytes arrived that nobody asked for
  kClosed,    // the peer closed it, or it failed
};

inline IdleSocket LookAtIdleSocket(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return IdleSocket::kQuiet;
  if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) return IdleSocket::kClosed;
  return IdleSocket::kReadable;
}

}  // namespace idem::internal
