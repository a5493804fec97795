#include "gateway/accept_throttle.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <boost/asio/error.hpp>

namespace idem::gateway {

bool IsResourceExhaustion(const boost::system::error_code& ec) {
  if (ec.category() != boost::system::system_category()) return false;
  const int e = ec.value();
  return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

std::chrono::milliseconds AcceptThrottle::Failed() {
  ++unlogged_;
  pause_ = pause_.count() == 0 ? kFirstPause : std::min(pause_ * 2, kMaxPause);
  return pause_;
}

std::optional<uint64_t> AcceptThrottle::TakeLogCount(Clock::time_point now) {
  if (unlogged_ == 0) return std::nullopt;
  if (last_log_ && now - *last_log_ < kLogInterval) return std::nullopt;
  last_log_ = now;
  const uint64_t n = unlogged_;
  unlogged_ = 0;
  return n;
}

DescriptorReserve::DescriptorReserve() { Restore(); }

DescriptorReserve::~DescriptorReserve() { Release(); }

bool DescriptorReserve::Release() {
  const int fd = fd_.exchange(-1);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

void DescriptorReserve::Restore() {
  if (fd_.load() >= 0) return;
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  int expected = -1;
  if (!fd_.compare_exchange_strong(expected, fd)) ::close(fd);
}

}  // namespace idem::gateway
