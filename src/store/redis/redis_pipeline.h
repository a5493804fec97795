// RedisPipeline: script calls from any number of threads, sent to one Redis server in
// pipelined batches by a thread of its own.
//
// Submit queues a call and returns at once; it never waits for the network, so an event loop
// may call it. The pipeline's thread takes everything queued, sends it in one write on one
// pooled connection and reads the replies in order (RedisPool::EvalPipelined), hands each reply
// to its call's `on_reply`, and goes back for whatever queued meanwhile. So a round trip
// carries every call that arrived while the previous one was on the wire, and under load the
// thread never sleeps between batches. Each call is still its own script: one failing call
// fails no other.
//
// Thread safety: Submit and counters from any thread. `on_reply` runs on the pipeline's
// thread and must not block (hand the result on: post it, or signal a waiter). The destructor
// answers every call still queued, then joins the thread.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/batch_thread.h"
#include "store/redis/redis_pool.h"

namespace idem::internal {

class RedisPipeline {
 public:
  using OnReply = std::function<void(Result<RedisReply>)>;

  struct Counters {
    uint64_t batches = 0;  // round trips
    uint64_t calls = 0;    // calls they carried
  };

  // Sends on connections of `pool`, which must outlive the pipeline.
  explicit RedisPipeline(RedisPool& pool);
  ~RedisPipeline();
  RedisPipeline(const RedisPipeline&) = delete;
  RedisPipeline& operator=(const RedisPipeline&) = delete;

  void Submit(RedisPool::EvalCall call, OnReply on_reply);

  Counters counters() const;

 private:
  struct Pending {
    RedisPool::EvalCall call;
    OnReply on_reply;
  };

  // On the pipeline's thread: sends one batch taken from the queue and answers each call.
  void Send(std::vector<Pending>& batch);

  RedisPool& pool_;
  std::vector<const RedisPool::EvalCall*> calls_;  // the pipeline thread's own
  BatchThread<Pending> thread_;                    // last: starts once the rest is constructed
};

}  // namespace idem::internal
