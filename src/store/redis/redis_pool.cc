#include "store/redis/redis_pool.h"

#include <openssl/evp.h>
#include <sys/time.h>

#include <algorithm>

#include "core/text.h"

namespace idem::internal {
namespace {

using namespace std::chrono_literals;
constexpr auto kFirstBackoff = 50ms;
constexpr auto kMaxBackoff = 2000ms;

timeval ToTimeval(Duration d) {
  const int64_t ms = std::max<int64_t>(1, d.count());
  return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
}

std::string Sha1Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha1(), nullptr);
  return ToHex(digest, size);
}

Status ContextError(const redisContext* context, std::string_view what) {
  const std::string message = std::string(what) + ": " + context->errstr;
  if (context->err == REDIS_ERR_IO && (errno == EAGAIN || errno == ETIMEDOUT)) {
    return DeadlineExceededError(message + " (timed out)");
  }
  return UnavailableError(message);
}

// A reply as a result: error replies become errors (MOVED and ASK among them, which
// RedisCluster, redis_cluster.h, follows).
Result<RedisReply> ReplyOrError(RedisReply reply) {
  if (reply->type != REDIS_REPLY_ERROR) return reply;
  const std::string error(reply->str, reply->len);
  if (error.rfind("NOAUTH", 0) == 0 || error.rfind("WRONGPASS", 0) == 0) {
    return FailedPreconditionError("redis: " + error);
  }
  return UnavailableError("redis: " + error);
}

bool IsNoScript(const Result<RedisReply>& reply) {
  return !reply.ok() && reply.status().message().find("NOSCRIPT") != std::string::npos;
}

Status InScript(const Status& status, const RedisScript& script) {
  return status.WithContext(std::string("script ") + std::string(script.name));
}

}  // namespace

RedisScript RedisScript::Make(std::string_view name, std::string_view body) {
  return RedisScript{name, body, Sha1Hex(body)};
}

RedisPool::RedisPool(RedisEndpoint endpoint) : endpoint_(std::move(endpoint)) {}

RedisPool::~RedisPool() {
  for (redisContext* context : idle_) redisFree(context);
}

Result<RedisReply> RedisPool::Run(const std::vector<std::string_view>& argv) {
  auto context = Checkout();
  if (!context.ok()) return context.status();
  bool healthy = true;
  auto reply = RunOn(*context, argv, healthy);
  Return(*context, healthy);
  return reply;
}

Result<RedisReply> RedisPool::Eval(const RedisScript& script, std::string_view key,
                                   const std::vector<std::string_view>& args, bool asking) {
  std::vector<std::string_view> argv = {"EVALSHA", script.sha1, "1", key};
  argv.insert(argv.end(), args.begin(), args.end());
  auto context = Checkout();
  if (!context.ok()) return context.status();
  bool healthy = true;
  // ASKING holds for the next command only: it is sent again before the EVAL fallback.
  auto ask = [&]() -> Status {
    if (!asking) return Status::Ok();
    auto asked = RunOn(*context, {"ASKING"}, healthy);
    return asked.ok() ? Status::Ok() : asked.status();
  };
  auto run = [&]() -> Result<RedisReply> {
    if (Status asked = ask(); !asked.ok()) return asked;
    return RunOn(*context, argv, healthy);
  };
  Result<RedisReply> reply = run();
  if (healthy && IsNoScript(reply)) {
    argv[0] = "EVAL";
    argv[1] = script.body;
    reply = run();
  }
  Return(*context, healthy);
  if (!reply.ok()) return InScript(reply.status(), script);
  return reply;
}

std::vector<Result<RedisReply>> RedisPool::EvalPipelined(const std::vector<const EvalCall*>& batch) {
  std::vector<Result<RedisReply>> results;
  results.reserve(batch.size());
  auto context = Checkout();
  if (!context.ok()) {
    for (const EvalCall* call : batch) results.emplace_back(InScript(context.status(), *call->script));
    return results;
  }
  redisContext* c = *context;
  // Appending only fills hiredis's output buffer (it fails only when out of memory); the first
  // redisGetReply writes the whole buffer.
  std::vector<const char*> args;
  std::vector<size_t> lengths;
  bool appended = true;
  for (const EvalCall* call : batch) {
    args.clear();
    lengths.clear();
    auto add = [&](std::string_view a) {
      args.push_back(a.data());
      lengths.push_back(a.size());
    };
    add("EVALSHA");
    add(call->script->sha1);
    add("1");
    add(call->key);
    for (const std::string& a : call->args) add(a);
    if (redisAppendCommandArgv(c, static_cast<int>(args.size()), args.data(), lengths.data()) !=
        REDIS_OK) {
      appended = false;
      break;
    }
  }
  if (!appended) {  // nothing was sent: the buffer goes with the connection
    Return(c, /*healthy=*/false);
    for (const EvalCall* call : batch) {
      results.emplace_back(InScript(UnavailableError("redis: out of memory queueing a command"),
                                    *call->script));
    }
    return results;
  }
  bool healthy = true;
  Status lost = Status::Ok();
  for (size_t i = 0; i < batch.size(); ++i) {
    void* raw = nullptr;
    if (healthy && (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr)) {
      healthy = false;
      lost = ContextError(c, "redis EVALSHA");
    }
    if (!healthy) {
      results.emplace_back(lost);
      continue;
    }
    results.push_back(ReplyOrError(RedisReply(static_cast<redisReply*>(raw))));
  }
  // NOSCRIPT (a restarted or flushed server): the script did not run; EVAL sends its body and
  // caches it again. Run after the rest of the batch, such a call may land after a later call
  // of the same key; but calls in one batch were in flight together, so they had no order.
  for (size_t i = 0; i < batch.size() && healthy; ++i) {
    if (!IsNoScript(results[i])) continue;
    const EvalCall& call = *batch[i];
    std::vector<std::string_view> argv = {"EVAL", call.script->body, "1", call.key};
    argv.insert(argv.end(), call.args.begin(), call.args.end());
    results[i] = RunOn(c, argv, healthy);
  }
  Return(c, healthy);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!results[i].ok()) results[i] = InScript(results[i].status(), *batch[i]->script);
  }
  return results;
}

Result<redisContext*> RedisPool::Checkout() {
  MutexLock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + endpoint_.command_timeout;
  while (true) {
    if (!idle_.empty()) {
      redisContext* context = idle_.back();
      idle_.pop_back();
      return context;
    }
    if (open_ < endpoint_.pool_size) break;
    if (!returned_.WaitUntil(lock, deadline) && idle_.empty()) {
      return DeadlineExceededError("redis: all " + std::to_string(endpoint_.pool_size) +
                                   " pooled connections stayed busy for " +
                                   std::to_string(endpoint_.command_timeout.count()) + " ms");
    }
  }
  const auto now = std::chrono::steady_clock::now();
  // While the server is down, one caller per backoff interval tries to connect; the others
  // fail fast with the last error instead of each waiting out a connect timeout.
  if (now < next_connect_ || (connecting_ > 0 && !last_connect_error_.empty())) {
    return UnavailableError("redis at " + endpoint_.host + ":" + std::to_string(endpoint_.port) +
                            " is unreachable (" + last_connect_error_ + "); retrying");
  }
  ++open_;
  ++connecting_;
  lock.Unlock();
  auto context = Connect();
  lock.Lock();
  --connecting_;
  if (!context.ok()) {
    --open_;
    backoff_ = backoff_.count() == 0 ? kFirstBackoff : std::min(kMaxBackoff, backoff_ * 2);
    next_connect_ = std::chrono::steady_clock::now() + backoff_;
    last_connect_error_ = context.status().message();
    returned_.NotifyOne();
    return context.status();
  }
  backoff_ = Duration(0);
  last_connect_error_.clear();
  return context;
}

void RedisPool::Return(redisContext* context, bool healthy) {
  MutexLock lock(mu_);
  if (healthy) {
    idle_.push_back(context);
  } else {
    redisFree(context);
    --open_;
  }
  returned_.NotifyOne();
}

Result<redisContext*> RedisPool::Connect() {
  const timeval connect_timeout = ToTimeval(endpoint_.connect_timeout);
  redisContext* context =
      redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, connect_timeout);
  if (context == nullptr) return UnavailableError("redis connect: out of memory");
  if (context->err != 0) {
    Status status = ContextError(context, "redis connect to " + endpoint_.host + ":" +
                                              std::to_string(endpoint_.port));
    redisFree(context);
    return status;
  }
  redisSetTimeout(context, ToTimeval(endpoint_.command_timeout));
  redisEnableKeepAlive(context);
  bool healthy = true;
  if (!endpoint_.password.empty()) {
    std::vector<std::string_view> auth = {"AUTH"};
    if (!endpoint_.user.empty()) auth.push_back(endpoint_.user);
    auth.push_back(endpoint_.password);
    auto reply = RunOn(context, auth, healthy);
    if (!reply.ok()) {
      redisFree(context);
      return FailedPreconditionError("redis AUTH failed: " + reply.status().message());
    }
  }
  if (endpoint_.db != 0) {
    const std::string db = std::to_string(endpoint_.db);
    auto reply = RunOn(context, {"SELECT", db}, healthy);
    if (!reply.ok()) {
      redisFree(context);
      return FailedPreconditionError("redis SELECT " + db + " failed: " + reply.status().message());
    }
  }
  return context;
}

Result<RedisReply> RedisPool::RunOn(redisContext* context,
                                    const std::vector<std::string_view>& argv, bool& healthy) {
  std::vector<const char*> args;
  std::vector<size_t> lengths;
  args.reserve(argv.size());
  lengths.reserve(argv.size());
  for (std::string_view a : argv) {
    args.push_back(a.data());
    lengths.push_back(a.size());
  }
  auto* raw = static_cast<redisReply*>(
      redisCommandArgv(context, static_cast<int>(args.size()), args.data(), lengths.data()));
  if (raw == nullptr) {
    healthy = false;
    return ContextError(context, "redis " + std::string(argv.front()));
  }
  return ReplyOrError(RedisReply(raw));
}

}  // namespace idem::internal
