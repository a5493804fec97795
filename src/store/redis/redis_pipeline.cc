#include "store/redis/redis_pipeline.h"

#include <utility>

namespace idem::internal {

RedisPipeline::RedisPipeline(RedisPool& pool)
    : pool_(pool), thread_([this](std::vector<Pending>& batch) { Send(batch); }) {}

RedisPipeline::~RedisPipeline() { thread_.Stop(); }

void RedisPipeline::Submit(RedisPool::EvalCall call, OnReply on_reply) {
  Pending pending{std::move(call), std::move(on_reply)};
  // Pushing fails only once the destructor runs, and nothing submits then.
  if (!thread_.Push(pending)) {
    pending.on_reply(UnavailableError("redis pipeline is closing; the call was not sent"));
  }
}

RedisPipeline::Counters RedisPipeline::counters() const {
  const auto counted = thread_.counters();
  return Counters{counted.batches, counted.items};
}

void RedisPipeline::Send(std::vector<Pending>& batch) {
  calls_.clear();
  for (const Pending& p : batch) calls_.push_back(&p.call);
  std::vector<Result<RedisReply>> replies = pool_.EvalPipelined(calls_);
  for (size_t i = 0; i < batch.size(); ++i) batch[i].on_reply(std::move(replies[i]));
}

}  // namespace idem::internal
