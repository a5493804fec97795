// The relay's own connections: PostgreSQL (listening for enqueues; attempt records, gauges,
// retention) and NATS, and the stream as last read, with the subjects this relay takes.
//
// Thread safety: the relay's loop only.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "idem/status.h"
#include "log/event_log.h"
#include "outbox/jetstream_publisher.h"
#include "outbox/outbox_db.h"
#include "outbox/relay_floor.h"
#include "outbox/relay_metrics.h"
#include "outbox/relay_options.h"

namespace idem::outbox {

class RelayConnections {
 public:
  // Every reference must outlive this.
  RelayConnections(const RelayOptions& options, RelayMetrics& metrics, RelayFloor& floor,
                   logging::Log& log)
      : options_(options), metrics_(metrics), floor_(floor), log_(log) {}

  // Connects what is not connected (PostgreSQL again when its connection broke), then checks
  // or creates the stream and settles the subjects this relay takes. kInvalidArgument when
  // --subjects reaches beyond the stream's; kFailedPrecondition when the NATS server refuses
  // the credentials; the connection errors otherwise.
  Status Connect();
  // Reads the stream again: its duplicate window and subjects may have changed. A failure is
  // logged and the stream as read before is kept.
  void RereadStream();

  // REQUIRES for each: Connect succeeded (since the connection was last found broken).
  OutboxDb& db() { return *db_; }
  JetStreamPublisher& nats() { return *nats_; }
  const StreamFacts& facts() const { return *facts_; }
  // Whether each connection is there and working, for the metrics.
  bool postgres_up() const { return db_ != nullptr && db_->healthy(); }
  bool nats_up() const { return nats_ != nullptr && nats_->connected(); }
  bool has_nats() const { return nats_ != nullptr; }
  // The subjects this relay takes, from --subjects or the stream's.
  const std::vector<std::string>& subjects() const { return subjects_; }
  // When the stream was last read.
  std::chrono::steady_clock::time_point stream_read() const { return stream_read_; }

  // The largest message the stream accepts (0: no limit).
  static int64_t MessageLimit(const StreamFacts& facts) {
    return facts.max_msg_size > 0 ? std::min(facts.max_msg_size, facts.max_payload)
                                  : facts.max_payload;
  }

 private:
  Status ConnectPostgres();
  Status ReadStream();
  // The subjects this relay takes, from --subjects or the stream's (checked against the
  // stream's: kInvalidArgument if --subjects reaches beyond them at start; a warning after).
  Status ApplySubjects(bool at_start);
  // Warnings about a stream whose duplicate window cannot drop what this relay republishes.
  void WarnAboutWindow() const;

  const RelayOptions& options_;
  RelayMetrics& metrics_;
  RelayFloor& floor_;
  logging::Log& log_;
  std::unique_ptr<OutboxDb> db_;
  std::unique_ptr<JetStreamPublisher> nats_;
  std::optional<StreamFacts> facts_;
  std::chrono::steady_clock::time_point stream_read_{};
  std::vector<std::string> subjects_;
  bool pg_connected_before_ = false;
};

}  // namespace idem::outbox
