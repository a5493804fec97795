#include "store/redis/redis_pipeline.h"

#include <utility>

namespace idem::internal {

RedisPipeline::RedisPipeline(RedisPool& pool) : pool_(pool), thread_([this] { Loop(); }) {}

RedisPipeline::~RedisPipeline() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  queued_.NotifyAll();
  thread_.join();
}

void RedisPipeline::Submit(RedisPool::EvalCall call, OnReply on_reply) {
  bool wake = false;
  {
    MutexLock lock(mu_);
    queue_.push_back(Pending{std::move(call), std::move(on_reply)});
    // A busy thread comes back for the queue by itself: wake it only when it sleeps, once.
    wake = idle_;
    idle_ = false;
  }
  if (wake) queued_.NotifyOne();
}

RedisPipeline::Counters RedisPipeline::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

void RedisPipeline::Loop() {
  std::vector<Pending> batch;
  std::vector<const RedisPool::EvalCall*> calls;
  MutexLock lock(mu_);
  while (true) {
    while (queue_.empty() && !stopping_) {
      idle_ = true;
      queued_.Wait(lock);
    }
    idle_ = false;
    if (queue_.empty()) return;  // stopping, and every call answered
    batch.swap(queue_);
    ++counters_.batches;
    counters_.calls += batch.size();
    lock.Unlock();
    calls.clear();
    for (const Pending& p : batch) calls.push_back(&p.call);
    std::vector<Result<RedisReply>> replies = pool_.EvalPipelined(calls);
    for (size_t i = 0; i < batch.size(); ++i) batch[i].on_reply(std::move(replies[i]));
    batch.clear();
    lock.Lock();
  }
}

}  // namespace idem::internal
