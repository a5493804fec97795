#include "gateway/event_loops.h"

#include <thread>

namespace idem::gateway {

EventLoops::EventLoops(int count) {
  for (int i = 0; i < count; ++i) {
    loops_.push_back(std::make_unique<Loop>());
    // A loop with no connection yet must not return from run().
    idle_.push_back(boost::asio::make_work_guard(*loops_.back()));
  }
}

boost::asio::io_context& EventLoops::Next() {
  return *loops_[next_.fetch_add(1, std::memory_order_relaxed) % loops_.size()];
}

void EventLoops::Run() {
  std::vector<std::thread> threads;
  for (size_t i = 1; i < loops_.size(); ++i) {
    threads.emplace_back([loop = loops_[i].get()] { loop->run(); });
  }
  loops_.front()->run();
  // The first loop returns when Stop is called; the others have been stopped with it.
  for (auto& t : threads) t.join();
}

void EventLoops::Stop() {
  for (auto& loop : loops_) loop->stop();
}

void EventLoops::DestroyAbandonedWork() {
  idle_.clear();
  for (auto it = loops_.rbegin(); it != loops_.rend(); ++it) (*it)->DestroyAbandonedWork();
}

}  // namespace idem::gateway
