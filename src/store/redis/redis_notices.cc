#include "store/redis/redis_notices.h"

#include <utility>

#include "store/settle_listener.h"
#include "store/settle_notice.h"

namespace idem::internal {
namespace {

std::string_view Str(const redisReply* r) { return {r->str, r->len}; }

// One SUBSCRIBE connection: replies arrive unasked, one per PUBLISH.
class RedisNoticeSource final : public NoticeSource {
 public:
  explicit RedisNoticeSource(redisContext* context) : context_(context) {}
  ~RedisNoticeSource() override { redisFree(context_); }
  RedisNoticeSource(const RedisNoticeSource&) = delete;
  RedisNoticeSource& operator=(const RedisNoticeSource&) = delete;

  int fd() const override { return context_->fd; }

  Status Drain(bool read,
               const std::function<void(const SettleNotice&)>& deliver) override {
    if (read && redisBufferRead(context_) != REDIS_OK) return Broken();
    for (;;) {
      void* raw = nullptr;
      if (redisGetReplyFromReader(context_, &raw) != REDIS_OK) return Broken();
      if (raw == nullptr) return Status::Ok();
      RedisReply reply(static_cast<redisReply*>(raw));
      // ["message", channel, payload]; the subscribe confirmation is skipped.
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3) continue;
      const redisReply* kind = reply->element[0];
      const redisReply* payload = reply->element[2];
      if (kind->type != REDIS_REPLY_STRING || Str(kind) != "message") continue;
      if (payload->type != REDIS_REPLY_STRING) continue;
      if (const ParsedNotice parsed = ParseRedisNotice(Str(payload)); !parsed.digest.empty()) {
        deliver(parsed.view());
      }
    }
  }

 private:
  Status Broken() const {
    return UnavailableError(std::string("redis subscriber: ") +
                            (context_->errstr[0] != '\0' ? context_->errstr : "connection lost"));
  }

  redisContext* const context_;
};

Result<std::unique_ptr<NoticeSource>> OpenSource(RedisPool& pool, const std::string& channel) {
  auto context = pool.Connect();
  if (!context.ok()) return context.status();
  bool healthy = true;
  auto reply = pool.RunOn(*context, {"SUBSCRIBE", channel}, healthy);
  if (!reply.ok()) {
    redisFree(*context);
    return reply.status().WithContext("redis SUBSCRIBE " + channel);
  }
  return std::unique_ptr<NoticeSource>(std::make_unique<RedisNoticeSource>(*context));
}

}  // namespace

std::string RedisSettleChannel(const RedisEndpoint& endpoint) {
  return endpoint.prefix + ":settled";
}

Result<std::unique_ptr<SettleSubscription>> SubscribeRedisSettled(
    RedisPool& pool, SettleHandler handler) {
  const std::string channel = RedisSettleChannel(pool.endpoint());
  auto first = OpenSource(pool, channel);
  // Only a refusal retrying cannot fix fails the call; an unreachable server is retried by the
  // listener's own thread.
  if (!first.ok() && first.status().code() == StatusCode::kFailedPrecondition) {
    return first.status();
  }
  std::unique_ptr<NoticeSource> source = first.ok() ? std::move(*first) : nullptr;
  return std::unique_ptr<SettleSubscription>(std::make_unique<SettleListener>(
      [&pool, channel] { return OpenSource(pool, channel); }, std::move(source),
      std::move(handler)));
}

}  // namespace idem::internal
