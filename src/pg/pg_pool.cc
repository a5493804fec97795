#include "pg/pg_pool.h"

#include <algorithm>
#include <optional>
#include <thread>

namespace idem::internal::pg {

PgPool::PgPool(PgConfig config, Setup setup)
    : config_(std::move(config)), setup_(std::move(setup)), slots_(config_.pool_size) {
  for (size_t i = slots_.size(); i > 0; --i) free_.push_back(i - 1);
}

Result<size_t> PgPool::Borrow(std::string_view op) {
  size_t index = 0;
  {
    MutexLock lock(mu_);
    const auto give_up_at = std::chrono::steady_clock::now() + config_.timeout;
    while (free_.empty() && cv_.WaitUntil(lock, give_up_at)) {
    }
    if (free_.empty()) {
      return UnavailableError("postgresql " + std::string(op) + ": no free connection within " +
                              std::to_string(config_.timeout.count()) + " ms (pool_size " +
                              std::to_string(config_.pool_size) + ")");
    }
    index = free_.back();
    free_.pop_back();
  }
  Slot& slot = slots_[index];
  if (slot.conn == nullptr || !slot.conn->StillOpen()) {
    slot.conn.reset();
    Status connected = Reconnect(slot, op);
    if (!connected.ok()) {
      GiveBack(index);
      return connected;
    }
  }
  return index;
}

Status PgPool::Reconnect(Slot& slot, std::string_view op) {
  std::chrono::milliseconds backoff_seen{0};
  {
    MutexLock lock(mu_);
    const auto now = SteadyClock::now();
    if (now < reconnect_at_) {
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(reconnect_at_ - now);
      return UnavailableError("postgresql " + std::string(op) + ": " + config_.display +
                              " unreachable; next reconnect attempt in " +
                              std::to_string(wait.count()) + " ms");
    }
    backoff_seen = backoff_;
    // While the server is failing, this borrower's connect is the one try until it ends.
    if (backoff_seen.count() > 0) reconnect_at_ = now + backoff_seen;
  }
  auto conn = PgConnection::Connect(config_.keywords, config_.values,
                                    config_.timeout + std::chrono::seconds(1));
  Status status = conn.ok() ? setup_(**conn) : conn.status();
  MutexLock lock(mu_);
  if (!status.ok()) {
    // Connects that failed together double the backoff once, not once each.
    backoff_ = std::max(backoff_, std::clamp(backoff_seen * 2, std::chrono::milliseconds(100),
                                             std::chrono::milliseconds(2000)));
    reconnect_at_ = SteadyClock::now() + backoff_;
    return status.WithContext(config_.display);
  }
  backoff_ = std::chrono::milliseconds(0);
  reconnect_at_ = {};
  slot.conn = std::move(*conn);
  return Status::Ok();
}

Status PgPool::Warm(size_t connections) {
  const size_t n = std::min(connections, slots_.size());
  // Each thread keeps its slot until all have one, so every borrow takes (and connects) a
  // slot of its own.
  std::vector<std::optional<Result<size_t>>> borrowed(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([this, &borrowed, i] { borrowed[i] = Borrow("warm"); });
  }
  for (auto& t : threads) t.join();
  Status first = Status::Ok();
  for (auto& b : borrowed) {
    if (b->ok()) {
      GiveBack(**b);
    } else if (first.ok()) {
      first = b->status();
    }
  }
  return first;
}

void PgPool::GiveBack(size_t index) {
  Slot& slot = slots_[index];
  if (slot.conn != nullptr && !slot.conn->healthy()) slot.conn.reset();
  {
    MutexLock lock(mu_);
    if (slot.conn != nullptr) {
      free_.push_back(index);
    } else {
      free_.insert(free_.begin(), index);  // lent last: connected slots go first
    }
  }
  cv_.NotifyOne();
}

}  // namespace idem::internal::pg
