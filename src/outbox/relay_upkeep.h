// The relay's periodic work on its own connection, between batches and while it waits for
// enqueues: the floor and the lag every second and the row counts as often as keeps them cheap,
// the stream read again every 30 s, the retention sweep every hour, the attempt records of
// relays that died mid-batch forgotten every minute, and a warning (at most once a minute) when
// rows on subjects this relay does not take wait too long.
//
// Thread safety: the relay's loop only.
#pragma once

#include <chrono>
#include <optional>

#include "log/event_log.h"
#include "outbox/outbox_db.h"
#include "outbox/relay_connections.h"
#include "outbox/relay_floor.h"
#include "outbox/relay_metrics.h"
#include "outbox/relay_options.h"

namespace idem::outbox {

class RelayUpkeep {
 public:
  // Every reference must outlive this.
  RelayUpkeep(const RelayOptions& options, RelayConnections& connections, RelayFloor& floor,
              RelayMetrics& metrics, logging::Log& log)
      : options_(options), connections_(connections), floor_(floor), metrics_(metrics), log_(log) {}

  // Does what is due. REQUIRES: connections.Connect() succeeded.
  void Run();

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  // The floor, the lag and (when due) the counts.
  void ReadGauges(TimePoint now);
  void Sweep(TimePoint now);
  void ForgetAttempts(TimePoint now);
  // Logs, at most once a minute, that pending rows on other subjects wait beyond
  // options.warn_uncovered_after.
  void WarnUncovered(const OutboxStats& stats);

  const RelayOptions& options_;
  RelayConnections& connections_;
  RelayFloor& floor_;
  RelayMetrics& metrics_;
  logging::Log& log_;
  TimePoint stats_read_{};
  TimePoint counts_due_{};
  std::optional<TimePoint> swept_;
  std::optional<TimePoint> attempts_forgotten_;
  std::optional<TimePoint> uncovered_warned_;
};

}  // namespace idem::outbox
