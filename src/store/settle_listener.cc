#include "store/settle_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cctype>

namespace idem::internal {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{50};
constexpr std::chrono::milliseconds kMaxBackoff{2000};
constexpr size_t kDigestChars = 16;  // Scope::Digest(): the first 16 hex digits

}  // namespace

SettleListener::SettleListener(Connect connect, std::unique_ptr<NoticeSource> first,
                               SettleHandler handler)
    : connect_(std::move(connect)), handler_(std::move(handler)) {
  if (pipe2(stop_pipe_, O_CLOEXEC) != 0) stop_pipe_[0] = stop_pipe_[1] = -1;
  thread_ = std::thread([this, source = std::move(first)]() mutable { Run(std::move(source)); });
}

SettleListener::~SettleListener() {
  if (stop_pipe_[1] >= 0) {
    const char byte = 1;
    while (write(stop_pipe_[1], &byte, 1) < 0 && errno == EINTR) {
    }
  }
  thread_.join();
  for (int fd : stop_pipe_) {
    if (fd >= 0) close(fd);
  }
}

int SettleListener::reconnects() const { return reconnects_.load(std::memory_order_relaxed); }

void SettleListener::Run(std::unique_ptr<NoticeSource> source) {
  if (stop_pipe_[0] < 0) return;  // no way to be stopped: listen not at all
  std::chrono::milliseconds backoff{0};
  bool first = source != nullptr;
  for (;;) {
    if (!source) {
      if (backoff.count() > 0 && SleepUnlessStopped(backoff)) return;
      auto opened = connect_();
      if (!opened.ok()) {
        backoff = std::clamp(backoff * 2, kFirstBackoff, kMaxBackoff);
        continue;
      }
      source = std::move(*opened);
      if (!first) reconnects_.fetch_add(1, std::memory_order_relaxed);
    }
    first = false;
    if (Listen(*source)) return;
    source.reset();
    backoff = kFirstBackoff;
  }
}

bool SettleListener::Listen(NoticeSource& source) {
  const auto deliver = [this](const SettleNotice& notice) { handler_(notice); };
  bool read = false;
  for (;;) {
    if (!source.Drain(read, deliver).ok()) return false;
    pollfd fds[2] = {{source.fd(), POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    const int n = poll(fds, 2, -1);
    if (n < 0 && errno != EINTR) return false;
    if (fds[1].revents != 0) return true;
    read = n > 0 && fds[0].revents != 0;
  }
}

bool SettleListener::SleepUnlessStopped(std::chrono::milliseconds d) {
  pollfd stop{stop_pipe_[0], POLLIN, 0};
  return poll(&stop, 1, static_cast<int>(d.count())) > 0;
}

std::string DigestFromNotice(std::string_view payload) {
  if (const size_t open = payload.rfind('{'); open != std::string_view::npos) {
    payload.remove_prefix(open + 1);
  }
  if (payload.size() < kDigestChars) return {};
  payload = payload.substr(0, kDigestChars);
  const bool hex = std::all_of(payload.begin(), payload.end(), [](unsigned char c) {
    return std::isdigit(c) || (c >= 'a' && c <= 'f');
  });
  return hex ? std::string(payload) : std::string();
}

}  // namespace idem::internal
