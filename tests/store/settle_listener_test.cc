// SettleListener: the thread behind ExecutionHooks::SubscribeSettled, over a pipe standing in for a
// server connection (the contract suite runs it against real Redis and PostgreSQL servers).
#include "store/settle_listener.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "core/response_codec.h"
#include "store/settle_notice.h"
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

// ---- the payloads (settle_notice.h), as the stores' SQL and Lua write them ------------------

const std::string kHexDigest(64, 'a');  // a SHA-256 in hex; the digest is its first 16 digits
const std::string kDigest(16, 'a');

Fingerprint TestFingerprint() {
  auto fp = Fingerprint::FromRaw(std::string(Fingerprint::kSize, '\x5a'));
  EXPECT_TRUE(fp.ok());
  return *fp;
}

StoredResponse TestResponse() {
  return {201, {{"Location", "/v1/payments/1"}, {"X-Bytes", std::string("\0\n{}", 4)}},
          std::string("{\"id\":1}\0\xff", 10)};
}

std::string Base64(std::string_view raw) {  // what PostgreSQL's encode(..., 'base64') gives
  std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(raw.data()),
                                static_cast<int>(raw.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string PostgresPayload() {
  const Fingerprint fp = TestFingerprint();
  const std::string response = EncodeResponse(TestResponse());
  return kHexDigest + " " + fp.ToHex() + " " + std::to_string(response.size()) + " " +
         Base64(response);
}

std::string RedisPayload(const std::string& key = "idem:{" + kHexDigest + "}") {
  const std::string response = EncodeResponse(TestResponse());
  return "=" + std::to_string(response.size()) + ":" + std::string(TestFingerprint().raw()) +
         response + key;
}

void ExpectCarried(const ParsedNotice& notice) {
  EXPECT_EQ(notice.digest, kDigest);
  ASSERT_TRUE(notice.response.has_value());
  ASSERT_TRUE(notice.fingerprint.has_value());
  EXPECT_EQ(*notice.response, TestResponse());
  EXPECT_EQ(*notice.fingerprint, TestFingerprint());
  const SettleNotice view = notice.view();
  EXPECT_EQ(view.scope_digest, kDigest);
  EXPECT_EQ(view.response, &*notice.response);
  EXPECT_EQ(view.fingerprint, &*notice.fingerprint);
}

void ExpectKeyOnly(const ParsedNotice& notice, const std::string& digest = kDigest) {
  EXPECT_EQ(notice.digest, digest);
  EXPECT_FALSE(notice.response.has_value());
  EXPECT_FALSE(notice.fingerprint.has_value());
  EXPECT_EQ(notice.view().response, nullptr);
  EXPECT_EQ(notice.view().fingerprint, nullptr);
}

TEST(SettleNoticeTest, ACompletionCarriesItsResponseAndFingerprint) {
  ExpectCarried(ParsePostgresNotice(PostgresPayload()));
  ExpectCarried(ParseRedisNotice(RedisPayload()));
  // Braces inside the response do not hide the key: it is found after the response.
  ExpectCarried(ParseRedisNotice(RedisPayload("pay-eu:x{y}:{" + kHexDigest + "}")));
}

TEST(SettleNoticeTest, AReleaseOrPurgeNamesOnlyTheKey) {
  ExpectKeyOnly(ParsePostgresNotice(kHexDigest));
  ExpectKeyOnly(ParseRedisNotice("idem:{" + kHexDigest + "}"));
  ExpectKeyOnly(ParsePostgresNotice("not a digest"), "");
  ExpectKeyOnly(ParseRedisNotice("=12:short"), "");
}

TEST(SettleNoticeTest, AReaderOfTheKeyAloneStillFindsItInACarryingNotice) {
  // What a gateway of an older version does with these payloads: it still wakes its waiters.
  EXPECT_EQ(DigestFromNotice(PostgresPayload()), kDigest);
  EXPECT_EQ(DigestFromNotice(RedisPayload()), kDigest);
}

TEST(SettleNoticeTest, ACarriedPartThatDoesNotDecodeLeavesTheKey) {
  const std::string pg = PostgresPayload();
  ExpectKeyOnly(ParsePostgresNotice(pg.substr(0, pg.size() - 1)));  // base64 cut short
  std::string bad_hex = pg;
  bad_hex[70] = 'x';  // inside the fingerprint
  ExpectKeyOnly(ParsePostgresNotice(bad_hex));
  ExpectKeyOnly(ParsePostgresNotice(kHexDigest + " 00 AAAA"));
  const std::string fp_hex = pg.substr(65, 64);
  ExpectKeyOnly(ParsePostgresNotice(kHexDigest + " " + fp_hex + " x12 AAAA"));
  ExpectKeyOnly(ParsePostgresNotice(kHexDigest + " " + fp_hex + " 12"));

  const std::string key = "idem:{" + kHexDigest + "}";
  const std::string response = EncodeResponse(TestResponse());
  const std::string fp(TestFingerprint().raw());
  // A length that overruns the payload, is not a number, or cuts the response short.
  ExpectKeyOnly(ParseRedisNotice("=99999:" + fp + response + key));
  ExpectKeyOnly(ParseRedisNotice("=1x:" + fp + response + key));
  ExpectKeyOnly(ParseRedisNotice("=4:" + fp + response + key));
  // A response whose headers' length overruns it.
  const std::string overrun = std::string("\0\0\0\xc9\xff\xff\xff\xff", 8) + "body";
  ExpectKeyOnly(ParseRedisNotice("=" + std::to_string(overrun.size()) + ":" + fp + overrun + key));
}

TEST(SettleNoticeTest, EveryTruncationOfAPayloadParsesWithoutHarm) {
  // A notice cut anywhere (or garbage) never crashes a gateway: at worst it names no key or
  // only the key, and a carried response is always the whole one.
  for (const std::string& payload : {PostgresPayload(), RedisPayload()}) {
    for (size_t n = 0; n <= payload.size(); ++n) {
      for (const ParsedNotice& notice :
           {ParsePostgresNotice(payload.substr(0, n)), ParseRedisNotice(payload.substr(0, n))}) {
        if (notice.response) {
          EXPECT_EQ(*notice.response, TestResponse()) << n;
        }
        EXPECT_EQ(notice.response.has_value(), notice.fingerprint.has_value());
      }
    }
  }
}

// One end of a pipe: each line written to the other end is a notice; EOF breaks it.
class PipeSource final : public NoticeSource {
 public:
  explicit PipeSource(int fd) : fd_(fd) {}
  ~PipeSource() override { close(fd_); }
  int fd() const override { return fd_; }
  Status Drain(bool read,
               const std::function<void(const SettleNotice&)>& deliver) override {
    if (read) {
      char buf[512];
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) return UnavailableError("pipe closed");
      pending_.append(buf, static_cast<size_t>(n));
    }
    for (size_t end; (end = pending_.find('\n')) != std::string::npos;) {
      const std::string line = pending_.substr(0, end);
      SettleNotice notice;
      notice.scope_digest = line;
      deliver(notice);
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
    if (refuse_) {
      ++refused_;
      opened_.notify_all();
      return UnavailableError("refused");
    }
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
  // Waits until `count` attempts to open have been refused in all.
  bool WaitRefused(int count) {
    std::unique_lock lock(mu_);
    return opened_.wait_for(lock, 10s, [&] { return refused_ >= count; });
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
  int refused_ = 0;
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
  ASSERT_TRUE(pipes.WaitRefused(2)) << "the listener gave up after a refusal";
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
    auto listener = std::make_unique<SettleListener>([&] { return pipes.Open(); }, std::move(first),
                                                     received.Handler());
    if (connected) {
      // Blocked in poll: it delivered a notice and waits for the next.
      pipes.Send("listening");
      ASSERT_EQ(received.AtLeast(1).back(), "listening");
    } else {
      // Backing off: refused five times, with pauses of 50 to 400 ms between the attempts, it
      // now sleeps 800 ms before the next one.
      ASSERT_TRUE(pipes.WaitRefused(5));
    }
    const auto stopping = std::chrono::steady_clock::now();
    listener.reset();
    const auto stopped_after = std::chrono::steady_clock::now() - stopping;
    EXPECT_LT(stopped_after, connected ? 1s : 400ms) << "connected " << connected;
  }
}

}  // namespace
}  // namespace idem::internal
