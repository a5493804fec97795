#include "store/redis/redis_store.h"

#include <charconv>

#include "core/response_codec.h"
#include "core/store_checks.h"
#include "core/wait_for_done.h"
#include "store/redis/redis_cluster.h"
#include "store/redis/redis_notices.h"
#include "store/redis/redis_pipeline.h"
#include "store/redis/redis_pool.h"
#include "store/redis/redis_scripts.h"
#include "store/tiers.h"

namespace idem {
namespace {

using internal::RedisPool;
using internal::RedisReply;

Status Malformed(std::string_view what) {
  return DataLossError(std::string("redis: unexpected reply to ") + std::string(what));
}

std::string_view Str(const redisReply* r) { return {r->str, r->len}; }

// Integers come back as integers from Lua numbers and as decimal strings from hash fields.
Result<int64_t> Int(const redisReply* r, std::string_view what) {
  if (r->type == REDIS_REPLY_INTEGER) return static_cast<int64_t>(r->integer);
  if (r->type == REDIS_REPLY_STRING) {
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(r->str, r->str + r->len, value);
    if (ec == std::errc() && ptr == r->str + r->len) return value;
  }
  return Malformed(what);
}

class RedisStore final : public internal::FastTier, public internal::WriteQueue {
 public:
  RedisStore(internal::RedisEndpoint endpoint, const StoreOptions& options)
      : options_(options),
        server_clock_(options.clock == SystemClock()),
        endpoint_(std::move(endpoint)),
        abandoned_ms_(std::to_string(options.abandoned_retention.count())),
        channel_(internal::RedisSettleChannel(endpoint_)) {
    if (endpoint_.cluster) {
      cluster_ = std::make_unique<internal::RedisCluster>(endpoint_);
    } else {
      single_ = std::make_unique<internal::RedisPool>(endpoint_);
      pipeline_ = std::make_unique<internal::RedisPipeline>(*single_);
    }
  }

  // Reaches the server (PING), or reads a cluster's slot map.
  Status Open() {
    if (cluster_) return cluster_->Refresh();
    auto reply = single_->Run({"PING"});
    return reply.ok() ? Status::Ok() : reply.status();
  }

  // Begin, Complete and Release are their Submit forms waited for: one code path, whose
  // calls share pipelined round trips with every other write in flight (single server).
  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fingerprint,
                             Duration lease) override {
    return internal::WaitForDone<BeginOutcome>([&](Done<BeginOutcome> done) {
      SubmitBegin(scope, fingerprint, lease, std::move(done));
    });
  }

  Result<CompleteOutcome> Complete(const Scope& scope, FencingToken token,
                                   const StoredResponse& response, Duration ttl) override {
    return internal::WaitForDone<CompleteOutcome>([&](Done<CompleteOutcome> done) {
      SubmitComplete(scope, token, response, ttl, std::move(done));
    });
  }

  Result<ReleaseOutcome> Release(const Scope& scope, FencingToken token) override {
    return internal::WaitForDone<ReleaseOutcome>(
        [&](Done<ReleaseOutcome> done) { SubmitRelease(scope, token, std::move(done)); });
  }

  // On one server, writes queue for the pipeline's thread (SubmitEval) and the Submit calls
  // return at once; a cluster's calls go to the node owning each key and run one at a time on
  // the calling thread.
  bool QueuesWrites() const override { return pipeline_ != nullptr; }
  bool SubmitsWithoutBlocking() const override { return pipeline_ != nullptr; }

  void SubmitBegin(const Scope& scope, const Fingerprint& fingerprint, Duration lease,
                   Done<BeginOutcome> done) override {
    if (Status s = internal::CheckLease(lease); !s.ok()) return done(s);
    SubmitEval(internal::RedisBeginScript(), KeyFor(scope),
               {Now(), std::string(fingerprint.raw()), std::to_string(lease.count()),
                abandoned_ms_},
               [done = std::move(done), digest = scope.Digest()](Result<RedisReply> reply) {
                 Result<BeginOutcome> outcome =
                     reply.ok() ? DecodeBegin(reply->get()) : Result<BeginOutcome>(reply.status());
                 if (!outcome.ok()) return done(outcome.status().WithContext("begin scope " + digest));
                 done(std::move(outcome));
               });
  }

  void SubmitComplete(const Scope& scope, FencingToken token, const StoredResponse& response,
                      Duration ttl, Done<CompleteOutcome> done) override {
    if (Status s = internal::CheckTtl(ttl); !s.ok()) return done(s);
    SubmitEval(internal::RedisCompleteScript(), KeyFor(scope),
               {Now(), std::to_string(token), std::to_string(ttl.count()),
                internal::EncodeResponse(response), channel_},
               [done = std::move(done), digest = scope.Digest()](Result<RedisReply> reply) {
                 Result<bool> flag = Flag(reply, internal::RedisCompleteScript());
                 if (!flag.ok()) return done(flag.status().WithContext("complete scope " + digest));
                 done(*flag ? CompleteOutcome::kOk : CompleteOutcome::kFenced);
               });
  }

  void SubmitRelease(const Scope& scope, FencingToken token, Done<ReleaseOutcome> done) override {
    SubmitEval(internal::RedisReleaseScript(), KeyFor(scope),
               {Now(), std::to_string(token), abandoned_ms_, channel_},
               [done = std::move(done), digest = scope.Digest()](Result<RedisReply> reply) {
                 Result<bool> flag = Flag(reply, internal::RedisReleaseScript());
                 if (!flag.ok()) return done(flag.status().WithContext("release scope " + digest));
                 done(*flag ? ReleaseOutcome::kReleased : ReleaseOutcome::kFenced);
               });
  }

  Result<CompleteOutcome> Accept(const Scope& scope, FencingToken token,
                                 const StoredResponse& accepted, Duration lease) override {
    IDEM_RETURN_IF_ERROR(internal::CheckLease(lease));
    const std::string key = KeyFor(scope);
    const std::string now = Now();
    const std::string token_text = std::to_string(token);
    const std::string lease_ms = std::to_string(lease.count());
    const std::string encoded = internal::EncodeResponse(accepted);
    auto done = RunFlag(internal::RedisAcceptScript(), key,
                        {now, token_text, lease_ms, encoded, abandoned_ms_});
    if (!done.ok()) return done.status().WithContext("accept scope " + scope.Digest());
    return *done ? CompleteOutcome::kOk : CompleteOutcome::kFenced;
  }

  Result<std::optional<Record>> Get(const Scope& scope) override {
    const std::string key = KeyFor(scope);
    const std::string now = Now();
    auto reply = Eval(internal::RedisGetScript(), key, {now});
    if (!reply.ok()) return reply.status().WithContext("get scope " + scope.Digest());
    auto record = DecodeRecord(scope, reply->get());
    if (!record.ok()) return record.status().WithContext("get scope " + scope.Digest());
    return record;
  }

  Result<bool> Warm(const Record& record, FencingToken claim) override {
    const std::string key = KeyFor(record.scope);
    const std::string now = Now();
    const std::string claim_text = std::to_string(claim);
    const std::string state = std::to_string(static_cast<int>(record.state));
    const std::string token = std::to_string(record.token);
    const std::string lease = std::to_string(ToMillis(record.lease_deadline));
    const std::string created = std::to_string(ToMillis(record.created_at));
    const std::string expires = std::to_string(ToMillis(record.expires_at));
    const std::optional<StoredResponse>& kept =
        record.state == RecordState::kCompleted ? record.response : record.accepted;
    const std::string response = kept ? internal::EncodeResponse(*kept) : std::string();
    auto done = RunFlag(internal::RedisWarmScript(), key,
                        {now, claim_text, state, record.fingerprint.raw(), token, lease, created,
                         expires, response, channel_});
    if (!done.ok()) return done.status().WithContext("warm scope " + record.scope.Digest());
    return *done;
  }

  Result<bool> Purge(const Scope& scope) override {
    const std::string key = KeyFor(scope);
    const std::string now = Now();
    auto done = RunFlag(internal::RedisPurgeScript(), key, {now, abandoned_ms_, channel_});
    if (!done.ok()) return done.status().WithContext("purge scope " + scope.Digest());
    return *done;
  }

  Status Watch(const Scope& scope) override {
    const std::string key = KeyFor(scope);
    const std::string now = Now();
    auto done = RunFlag(internal::RedisWatchScript(), key, {now});
    return done.ok() ? Status::Ok() : done.status().WithContext("watch scope " + scope.Digest());
  }

  Result<std::unique_ptr<internal::SettleSubscription>> SubscribeSettled(
      internal::SettleHandler on_settled) override {
    // Pub/sub reaches every node of a cluster: any one will do.
    return internal::SubscribeRedisSettled(cluster_ ? cluster_->seed_pool() : *single_,
                                           std::move(on_settled));
  }

  // Redis expires records by itself (PEXPIRE at each record's expiry).
  Result<uint64_t> Sweep(TimePoint) override { return uint64_t{0}; }

  internal::RedisStats Stats() const {
    if (pipeline_ == nullptr) return {};
    const auto counted = pipeline_->counters();
    return internal::RedisStats{counted.batches, counted.calls};
  }

  std::string Describe() const override {
    return endpoint_.Describe() + (server_clock_ ? ", server clock" : ", injected clock");
  }

 private:
  std::string KeyFor(const Scope& scope) const {
    auto digest = Sha256Hex(scope.Encoded());
    // Sha256Hex fails only with a broken OpenSSL; fall back to a key that cannot collide
    // with a digest rather than sharing one between scopes.
    return endpoint_.prefix + ":{" + (digest.ok() ? *digest : "raw:" + scope.Encoded()) +
           "}";
  }

  // One script call on the server, or on the cluster node that owns the key.
  Result<internal::RedisReply> Eval(const internal::RedisScript& script, const std::string& key,
                                    const std::vector<std::string_view>& args) {
    return cluster_ ? cluster_->Eval(script, key, args) : single_->Eval(script, key, args);
  }

  std::string Now() const {
    return server_clock_ ? std::string() : std::to_string(ToMillis(options_.clock->Now()));
  }

  Result<bool> RunFlag(const internal::RedisScript& script, const std::string& key,
                       const std::vector<std::string_view>& args) {
    return Flag(Eval(script, key, args), script);
  }

  // A script's 0/1 answer.
  static Result<bool> Flag(const Result<RedisReply>& reply, const internal::RedisScript& script) {
    if (!reply.ok()) return reply.status();
    if ((*reply)->type != REDIS_REPLY_INTEGER) return Malformed(script.name);
    return (*reply)->integer == 1;
  }

  // One write script call, its reply handed to `on_reply`: on one server queued for the
  // pipeline's next batch (on_reply then runs on its thread), on a cluster run here and now.
  void SubmitEval(const internal::RedisScript& script, std::string key,
                  std::vector<std::string> args,
                  std::function<void(Result<RedisReply>)> on_reply) {
    if (cluster_) {
      const std::vector<std::string_view> views(args.begin(), args.end());
      return on_reply(cluster_->Eval(script, key, views));
    }
    pipeline_->Submit({&script, std::move(key), std::move(args)}, std::move(on_reply));
  }

  static Result<BeginOutcome> DecodeBegin(const redisReply* r) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1) return Malformed("begin");
    auto code = Int(r->element[0], "begin");
    if (!code.ok()) return code.status();
    auto field = [&](size_t i) -> Result<int64_t> {
      if (r->elements <= i) return Malformed("begin");
      return Int(r->element[i], "begin");
    };
    switch (*code) {
      case 1: {
        auto token = field(1);
        if (!token.ok()) return token.status();
        return BeginOutcome(Acquired{static_cast<FencingToken>(*token)});
      }
      case 2: {
        auto token = field(1);
        auto previous = field(2);
        if (!token.ok() || !previous.ok()) return Malformed("begin");
        return BeginOutcome(TakenOver{static_cast<FencingToken>(*token),
                                      static_cast<FencingToken>(*previous)});
      }
      case 3: {
        if (r->elements < 2 || r->element[1]->type != REDIS_REPLY_STRING) {
          return DataLossError("redis: a completed record has no stored response");
        }
        auto response = internal::DecodeResponse(Str(r->element[1]));
        if (!response.ok()) return response.status();
        return BeginOutcome(Replay{std::move(*response)});
      }
      case 4: {
        auto retry = field(1);
        if (!retry.ok()) return retry.status();
        InFlight in_flight{Duration(*retry), std::nullopt};
        if (r->elements >= 3 && r->element[2]->type == REDIS_REPLY_STRING) {
          auto accepted = internal::DecodeResponse(Str(r->element[2]));
          if (!accepted.ok()) return accepted.status();
          in_flight.accepted = std::move(*accepted);
        }
        return BeginOutcome(std::move(in_flight));
      }
      case 5:
        return BeginOutcome(Mismatch{});
      default:
        return Malformed("begin");
    }
  }

  static Result<std::optional<Record>> DecodeRecord(const Scope& scope, const redisReply* r) {
    if (r->type != REDIS_REPLY_ARRAY) return Malformed("get");
    if (r->elements == 0) return std::optional<Record>();
    if (r->elements != 7) return Malformed("get");
    for (size_t i = 0; i < 7; ++i) {
      if (r->element[i]->type != REDIS_REPLY_STRING) return DataLossError("redis: record field missing");
    }
    auto state = Int(r->element[0], "get");
    auto token = Int(r->element[2], "get");
    auto lease = Int(r->element[3], "get");
    auto created = Int(r->element[4], "get");
    auto expires = Int(r->element[5], "get");
    auto fingerprint = Fingerprint::FromRaw(Str(r->element[1]));
    if (!state.ok() || !token.ok() || !lease.ok() || !created.ok() || !expires.ok()) {
      return DataLossError("redis: record has a malformed number");
    }
    if (!fingerprint.ok()) return fingerprint.status();
    if (*state != 1 && *state != 2) return DataLossError("redis: record has an unknown state");
    Record record;
    record.scope = scope;
    record.fingerprint = *fingerprint;
    record.state = static_cast<RecordState>(*state);
    record.token = static_cast<FencingToken>(*token);
    record.lease_deadline = FromMillis(*lease);
    record.created_at = FromMillis(*created);
    record.expires_at = FromMillis(*expires);
    // The get script sends '' for a missing r: an in-flight record without an accepted
    // response (an encoded response is never empty).
    if (record.state == RecordState::kCompleted || !Str(r->element[6]).empty()) {
      auto response = internal::DecodeResponse(Str(r->element[6]));
      if (!response.ok()) return response.status();
      (record.state == RecordState::kCompleted ? record.response : record.accepted) =
          std::move(*response);
    }
    return std::optional<Record>(std::move(record));
  }

  const StoreOptions options_;
  const bool server_clock_;
  const internal::RedisEndpoint endpoint_;
  std::unique_ptr<internal::RedisPool> single_;      // one server, or
  std::unique_ptr<internal::RedisCluster> cluster_;  // the nodes of a cluster
  std::unique_ptr<internal::RedisPipeline> pipeline_;  // one server's writes (destroyed first)
  const std::string abandoned_ms_;
  const std::string channel_;  // where watched records' settles are published
};

}  // namespace

Result<std::unique_ptr<Store>> OpenRedisStore(std::string_view url, const StoreOptions& options) {
  auto store = internal::OpenRedisFastTier(url, options);
  if (!store.ok()) return store.status();
  return std::unique_ptr<Store>(std::move(*store));
}

namespace internal {

std::optional<RedisStats> GetRedisStats(Store& store) {
  auto* redis = dynamic_cast<RedisStore*>(&store);
  if (redis == nullptr) return std::nullopt;
  return redis->Stats();
}

Result<std::unique_ptr<FastTier>> OpenRedisFastTier(std::string_view url,
                                                    const StoreOptions& options) {
  auto endpoint = ParseRedisUrl(url);
  if (!endpoint.ok()) return endpoint.status();
  const std::string where = endpoint->Describe();
  auto store = std::make_unique<RedisStore>(std::move(*endpoint), options);
  Status opened = store->Open();
  if (!opened.ok()) return opened.WithContext("open " + where);
  return std::unique_ptr<FastTier>(std::move(store));
}

}  // namespace internal

}  // namespace idem
