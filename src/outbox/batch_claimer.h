// How the relay locks its batches of outbox rows: one now, or the next ones ahead, in the
// background, while the batch before them is published (kClaimsAhead at a time).
//
// Thread safety: the relay's loop calls every method; the locks ahead run on a thread of their
// own, which the destructor waits for.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/thread_pool.hpp>

#include "idem/status.h"
#include "outbox/batch_connections.h"
#include "outbox/outbox_db.h"
#include "outbox/relay_floor.h"
#include "outbox/relay_metrics.h"

namespace idem::outbox {

// A batch of rows this relay holds: locked by the open transaction of `db`, a connection of
// BatchConnections. Empty `rows` (and no db) when the outbox had nothing to take.
struct HeldBatch {
  std::unique_ptr<OutboxDb> db;
  std::vector<ClaimedRow> rows;
  // The lock's scan reached its limit (counting rows held back for their key): more rows
  // may be waiting, even if `rows` is short.
  bool full = false;
};

class BatchClaimer {
 public:
  // Every reference must outlive this. `stop` is the relay's stop flag.
  BatchClaimer(int batch_rows, BatchConnections& connections, RelayFloor& floor,
               RelayMetrics& metrics, const std::atomic<bool>& stop);
  ~BatchClaimer();  // waits for the locks ahead to end

  // Locks the next batch on a connection of the pool (any thread): rows on `subjects` above
  // `after_id`, or from the floor if there are none; `held`, the keyed rows this relay's
  // earlier batches publish before it (see OutboxDb::LockBatch). A lock whose rows were all
  // held back for their keys is given back at once and the scan goes on past them.
  Result<HeldBatch> Lock(int64_t after_id, const std::vector<std::string>& subjects,
                         const std::vector<int64_t>& held);
  // Starts locking batches in the background until kClaimsAhead are running, each on
  // `subjects` with `held`.
  void ClaimAhead(const std::vector<std::string>& subjects, const std::vector<int64_t>& held);
  // True while a batch locked ahead waits to be taken.
  bool has_ahead() const { return !ahead_.empty(); }
  // The oldest batch locked ahead (waiting for its lock to end). REQUIRES: has_ahead().
  Result<HeldBatch> TakeAhead();
  // Ends a batch's transaction without a change and returns its connection to the pool.
  void GiveBack(HeldBatch& held);
  // Waits for the batches locked ahead and gives their rows back at once. Returns how many rows
  // were given back.
  size_t GiveBackAhead();

 private:
  const int batch_rows_;
  BatchConnections& connections_;
  RelayFloor& floor_;
  RelayMetrics& metrics_;
  const std::atomic<bool>& stop_;
  // The batches being locked ahead, oldest first. Each lock starts when the one before it
  // has locked its rows, so that it can start past them.
  struct Ahead {
    std::future<Result<HeldBatch>> batch;
    std::shared_future<void> locked;
  };
  std::deque<Ahead> ahead_;
  uint64_t locks_ahead_ = 0;
  // The highest row id this relay has locked: batches locked ahead start past it (most of the
  // time; see ClaimAhead).
  std::atomic<int64_t> highest_locked_{0};
  // One thread for the relay's life (a thread per batch cost a clone and an exit per batch).
  boost::asio::thread_pool locker_{1};
};

}  // namespace idem::outbox
