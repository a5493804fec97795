// SettleListener: the thread behind Store::SubscribeSettled, over a pipe standing in for a
// server connection (the contract suite runs it against real Redis and PostgreSQL servers).
#include "store/settle_listener.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "util/notice_log.h"

namespace idem::internal {
namespace {

using namespace std::chrono_literals;

TEST(DigestFromNoticeTest, TakesTheScopeDigestFromAHexIdOrARedisKey) {
  const std::string hex = "0123456789abcdef" + std::string(48, 'f');
  EXPECT_EQ(DigestFromNotice(hex), "0123456789abcdef");
  EXPECT_EQ(DigestFromNotice("idem:{" + hex + "}"), "0123456789abcdef");
  EXPECT_EQ(DigestFromNotice("pay-eu:x{y}:{" + hex + "}"), "0123456789abcdef");
  EXPECT_EQ(DigestFromNotice(""), "");
  EXPECT_EQ(DigestFromNotice("0123"), "");
  EXPECT_EQ(DigestFromNotice("idem:{raw:tenant-key}"), "") << "not a digest: names no waiter";
  EXPECT_EQ(DigestFromNotice("0123456789ABCDEF"), "") << "digests are lower-case";
}

// One end of a pipe: each line written to the other end is a notice; EOF breaks it.
class PipeSource final : public NoticeSource {
 public:
  explicit PipeSource(int fd) : fd_(fd) {}
  ~PipeSource() override { close(fd_); }
  int fd() const override { return fd_; }
  Status Drain(bool read, const std::function<void(std::string_view)>& deliver) override {
    if (read) {
      char buf[512];
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) return UnavailableError("pipe closed");
      pending_.append(buf, static_cast<size_t>(n));
    }
    for (size_t end; (end = pending_.find('\n')) != std::string::npos;) {
      deliver(pending_.substr(0, end));
      pending_.erase(0, end + 1);
    }
    return Status::Ok();
  }

 private:
  const int fd_;
  std::string pending_;
};

// Hands out pipe sources one by one; the test writes to (or closes) the current one.
class Pipes {
 public:
  ~Pipes() {
    std::lock_guard lock(mu_);
    for (int fd : writers_) close(fd);
  }
  Result<std::unique_ptr<NoticeSource>> Open() {
    std::lock_guard lock(mu_);
    if (refuse_) return UnavailableError("refused");
    int fds[2];
    if (pipe(fds) != 0) return UnavailableError("pipe");
    writers_.push_back(fds[1]);
    opened_.notify_all();
    return std::unique_ptr<NoticeSource>(std::make_unique<PipeSource>(fds[0]));
  }
  bool WaitOpened(size_t count) {
    std::unique_lock lock(mu_);
    return opened_.wait_for(lock, 5s, [&] { return writers_.size() >= count; });
  }
  void Send(const std::string& line) {
    std::lock_guard lock(mu_);
    const std::string text = line + "\n";
    ASSERT_EQ(write(writers_.back(), text.data(), text.size()), ssize_t(text.size()));
  }
  void BreakCurrent() {
    std::lock_guard lock(mu_);
    close(writers_.back());
    writers_.back() = -1;
  }
  void Refuse(bool refuse) {
    std::lock_guard lock(mu_);
    refuse_ = refuse;
  }

 private:
  std::mutex mu_;
  std::condition_variable opened_;
  std::vector<int> writers_;
  bool refuse_ = false;
};

TEST(SettleListenerTest, DeliversNoticesAndReconnectsWithBackoffAfterAFailure) {
  Pipes pipes;
  testing::NoticeLog received;
  auto first = pipes.Open();
  ASSERT_TRUE(first.ok());
  SettleListener listener([&] { return pipes.Open(); }, std::move(*first), received.Handler());
  pipes.Send("one");
  pipes.Send("two");
  EXPECT_EQ(received.AtLeast(2), (std::vector<std::string>{"one", "two"}));

  // The connection breaks and the server refuses for a while: the listener keeps trying.
  pipes.Refuse(true);
  pipes.BreakCurrent();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(listener.reconnects(), 0);
  pipes.Refuse(false);
  ASSERT_TRUE(pipes.WaitOpened(2)) << "the listener never reconnected";
  pipes.Send("three");
  EXPECT_EQ(received.AtLeast(3).back(), "three");
  EXPECT_EQ(listener.reconnects(), 1);
}

TEST(SettleListenerTest, StopsAtOnceWhileWaitingForNoticesOrBetweenAttempts) {
  Pipes pipes;
  testing::NoticeLog received;
  for (bool connected : {true, false}) {
    pipes.Refuse(!connected);
    std::unique_ptr<NoticeSource> first;
    if (connected) first = std::move(*pipes.Open());
    const auto start = std::chrono::steady_clock::now();
    {
      SettleListener listener([&] { return pipes.Open(); }, std::move(first), received.Handler());
      std::this_thread::sleep_for(connected ? 50ms : 2500ms);  // blocked in poll / backing off
    }
    const auto stopped_after = std::chrono::steady_clock::now() - start;
    EXPECT_LT(stopped_after, connected ? 1s : 3500ms) << "connected " << connected;
  }
}

}  // namespace
}  // namespace idem::internal
