// How the relay settles a published batch: parks the rows the stream rejected, then marks
// the acknowledged rows published and stamps the failed ones in the batch's own transaction,
// committed on a thread of its own while the relay locks and publishes the next batches.
//
// At most one settle runs at a time; the batch's rows stay locked (and a later event of their
// ordering key stays blocked) until it commits, so order and safety are as if it were inline.
// A settle that fails rolls back: the rows are free at once and go out again, as duplicates
// the stream drops.
//
// Thread safety: the relay's loop calls every method; the commits run on a thread of their
// own, which the destructor waits for.
#pragma once

#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "idem/status.h"
#include "log/event_log.h"
#include "outbox/batch_connections.h"
#include "outbox/jetstream_publisher.h"
#include "outbox/outbox_db.h"
#include "outbox/relay_metrics.h"

namespace idem::outbox {

// A published batch whose PubAcks are still being collected.
struct InFlightBatch {
  JetStreamPublisher::BatchId id = 0;
  std::unique_ptr<OutboxDb> db;  // holds the rows until the settle commits
  std::string token;             // its attempt record
  std::vector<ClaimedRow> rows;
  std::vector<size_t> sent;  // the rows published, by index into rows, in publish order
  std::vector<int64_t> keyed;  // the ids of the rows published that have an ordering key
  size_t messages = 0;
};

class BatchSettler {
 public:
  // Every reference must outlive this.
  BatchSettler(BatchConnections& connections, RelayMetrics& metrics, logging::Log& log)
      : connections_(connections), metrics_(metrics), log_(log) {}
  ~BatchSettler();  // waits for the settle in flight

  // What a settle found in the batch's results.
  struct Outcome {
    size_t failed = 0;        // publishes that failed (their rows go out again)
    std::string first_error;  // the first of their errors
  };
  // Parks the rows of `batch` that stream `facts` rejected (on the batch's connection), then
  // starts the settle of the rest in the background (after the one before it ended) and gives
  // the connection back to the pool once it committed.
  Outcome Settle(InFlightBatch& batch, const std::vector<PublishResult>& results,
                 const StreamFacts& facts);
  // The keyed rows of the batch settling last that the stream acknowledged: until its settle
  // commits they stay pending, held by its transaction, and a lock may take their keys' next
  // rows (they are in the stream already).
  const std::vector<int64_t>& settling_keyed() const { return settling_keyed_; }
  // Waits for the settle in flight, if any.
  void Finish();

 private:
  // A batch's results sorted out: the rows to mark, the rows to stamp as failed.
  struct Sorted {
    std::vector<PublishedRow> acked;
    std::vector<RowKey> failed;
    std::string first_error;
    uint64_t duplicates = 0;
  };
  // Sorts `results` out, counting republishes beyond the duplicate window and parking the
  // rows the stream rejected.
  Sorted Sort(InFlightBatch& batch, const std::vector<PublishResult>& results,
              const StreamFacts& facts);
  void SettleInBackground(std::unique_ptr<OutboxDb> db, std::string token, Sorted sorted);
  // A settle that did not commit: its `rows` go out again.
  void MarkFailed(size_t rows, const Status& status);

  BatchConnections& connections_;
  RelayMetrics& metrics_;
  logging::Log& log_;
  std::vector<int64_t> settling_keyed_;
  std::future<void> marking_;  // the settle in flight, if any
  // One thread for the relay's life (a thread per batch cost a clone and an exit per batch).
  boost::asio::thread_pool settler_{1};
};

}  // namespace idem::outbox
