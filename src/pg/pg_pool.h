// A fixed-size pool of PgConnections, each set up (statements prepared) when it connects.
//
// A call borrows a connection for one statement. A connection that failed is dropped when it
// comes back, and one the server closed while it sat idle (a restart) is noticed when it is
// borrowed, before anything is sent on it; either is reconnected by its next borrower.
// Connected slots are lent first. A failed connect makes the whole pool refuse to connect,
// with a quick kUnavailable, until a backoff (100 ms doubling to 2 s) passes, and then lets
// one borrower try at a time, so a dead server costs callers one quick error each rather than
// a connect storm; the first connect that succeeds ends the backoff for every slot. Every wait
// is bounded: for a free connection by the timeout, for a reply by the connection's own
// timeout, for a connect by the connect timeout.
//
// Thread safety: safe to call from many threads at once.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "pg/pg_connection.h"
#include "pg/pg_url.h"

namespace idem::internal::pg {

class PgPool {
 public:
  using Setup = std::function<Status(PgConnection&)>;
  PgPool(PgConfig config, Setup setup);

  // Runs `fn` on a connected, set-up connection.
  template <typename T>
  Result<T> Run(std::string_view op, const std::function<Result<T>(PgConnection&)>& fn) {
    auto borrowed = Borrow(op);
    if (!borrowed.ok()) return borrowed.status();
    Result<T> result = fn(*slots_[*borrowed].conn);
    GiveBack(*borrowed);
    return result;
  }

  const PgConfig& config() const { return config_; }

  // Connects up to `connections` slots now (at most pool_size), in parallel, so that the
  // first burst of calls does not wait for connections made one after another. The first
  // error, if any; a slot that failed connects on first use, as it would have anyway.
  Status Warm(size_t connections);

 private:
  using SteadyClock = std::chrono::steady_clock;
  struct Slot {
    std::unique_ptr<PgConnection> conn;
  };

  // Returns the index of a slot whose connection is ready for use.
  Result<size_t> Borrow(std::string_view op) IDEM_EXCLUDES(mu_);
  void GiveBack(size_t index) IDEM_EXCLUDES(mu_);
  // Connects `slot` (owned by the caller) outside the lock, if the backoff allows.
  Status Reconnect(Slot& slot, std::string_view op) IDEM_EXCLUDES(mu_);

  const PgConfig config_;
  const Setup setup_;
  std::vector<Slot> slots_;  // each slot is touched only by the thread that borrowed it
  Mutex mu_;
  CondVar cv_;
  // A stack: the most recently used connection goes out first, slots without one last.
  std::vector<size_t> free_ IDEM_GUARDED_BY(mu_);
  // The pool's connect backoff: zero while connects succeed; no connect is tried before
  // reconnect_at_.
  std::chrono::milliseconds backoff_ IDEM_GUARDED_BY(mu_){0};
  SteadyClock::time_point reconnect_at_ IDEM_GUARDED_BY(mu_){};
};

}  // namespace idem::internal::pg
