// RedisPool: a bounded pool of blocking hiredis connections with timeouts and reconnects.
//
// Every command runs on one pooled connection under the endpoint's command timeout, so a call
// never waits longer than about connect_timeout + command_timeout. A connection that fails (a
// timeout, a reset, a protocol error) is closed and replaced on a later call; while the server
// is unreachable, new connections are attempted at most once per backoff interval (50 ms,
// doubling to 2 s), and calls in between fail at once with kUnavailable instead of piling up
// connect attempts. A dead Redis therefore turns into prompt errors (the gateway's 503), never
// into a hang.
//
// Thread safety: Run and Eval may be called from any number of threads; at most pool_size
// commands are in flight, others wait for a connection up to the command timeout.
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"
#include "idem/status.h"
#include "store/redis/redis_url.h"

namespace idem::internal {

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using RedisReply = std::unique_ptr<redisReply, ReplyDeleter>;

// A Lua script and its SHA-1, for EVALSHA.
struct RedisScript {
  std::string_view name;  // for error messages: "begin"
  std::string_view body;
  std::string sha1;       // lower-case hex of SHA-1(body)

  static RedisScript Make(std::string_view name, std::string_view body);
};

class RedisPool {
 public:
  explicit RedisPool(RedisEndpoint endpoint);
  ~RedisPool();
  RedisPool(const RedisPool&) = delete;
  RedisPool& operator=(const RedisPool&) = delete;

  // Runs one command. A reply of type REDIS_REPLY_ERROR is returned as kUnavailable (or
  // kFailedPrecondition for configuration problems such as a wrong password); transport
  // failures are kUnavailable or kDeadlineExceeded.
  Result<RedisReply> Run(const std::vector<std::string_view>& argv);

  // EVALSHA of `script` with one key; on NOSCRIPT (a restarted or flushed server) sends the
  // body with EVAL, which also caches it on the server. With `asking`, each is preceded by
  // ASKING on the same connection (a Redis Cluster ASK redirect: redis_cluster.h).
  Result<RedisReply> Eval(const RedisScript& script, std::string_view key,
                          const std::vector<std::string_view>& args, bool asking = false);

  // One script call of a pipelined batch (EvalPipelined).
  struct EvalCall {
    const RedisScript* script = nullptr;
    std::string key;
    std::vector<std::string> args;
  };

  // The calls of `batch` pipelined on one pooled connection: every EVALSHA written at once,
  // then the replies read in order, so a batch costs one round trip (and about one send and
  // one receive) however many calls it holds. Each result is what Eval would return for its
  // call; a NOSCRIPT reply is answered by EVAL on the same connection after the batch. No
  // connection to be had fails every call without sending anything; a connection lost partway
  // fails each call whose reply did not arrive (it may or may not have run, as with Eval).
  std::vector<Result<RedisReply>> EvalPipelined(const std::vector<const EvalCall*>& batch);

  const RedisEndpoint& endpoint() const { return endpoint_; }

  // A new connection outside the pool, set up as pooled ones are (timeouts, AUTH, SELECT), for
  // a caller that keeps it to itself, such as a subscriber; free it with redisFree. AUTH or
  // SELECT refused: kFailedPrecondition; server unreachable: kUnavailable.
  Result<redisContext*> Connect();
  // Runs argv on `context`; `healthy` is cleared when the connection must not be reused.
  Result<RedisReply> RunOn(redisContext* context, const std::vector<std::string_view>& argv,
                           bool& healthy);

 private:
  using SteadyTime = std::chrono::steady_clock::time_point;

  Result<redisContext*> Checkout() IDEM_EXCLUDES(mu_);
  void Return(redisContext* context, bool healthy) IDEM_EXCLUDES(mu_);

  const RedisEndpoint endpoint_;
  Mutex mu_;
  CondVar returned_;
  std::vector<redisContext*> idle_ IDEM_GUARDED_BY(mu_);
  int open_ IDEM_GUARDED_BY(mu_) = 0;        // connections checked out or idle
  int connecting_ IDEM_GUARDED_BY(mu_) = 0;  // connection attempts under way
  SteadyTime next_connect_ IDEM_GUARDED_BY(mu_){};
  std::chrono::milliseconds backoff_ IDEM_GUARDED_BY(mu_){0};
  std::string last_connect_error_ IDEM_GUARDED_BY(mu_);
};

}  // namespace idem::internal
