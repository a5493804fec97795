#include "outbox/relay_upkeep.h"

#include <fmt/format.h>

#include <algorithm>

#include "outbox/relay_text.h"

namespace idem::outbox {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr auto kStatsEvery = std::chrono::seconds(1);
constexpr auto kStreamEvery = std::chrono::seconds(30);
constexpr auto kSweepEvery = std::chrono::hours(1);
constexpr auto kForgetAttemptsEvery = std::chrono::minutes(1);
constexpr auto kUncoveredWarnEvery = std::chrono::minutes(1);

}  // namespace

void RelayUpkeep::Run() {
  const auto now = SteadyClock::now();
  if (now - stats_read_ >= kStatsEvery) ReadGauges(now);
  if (now - connections_.stream_read() >= kStreamEvery) connections_.RereadStream();
  if (options_.retention_days > 0 && (!swept_ || now - *swept_ >= kSweepEvery)) Sweep(now);
  // Attempt records of relays that died mid-batch, once their rows went out again.
  if (!attempts_forgotten_ || now - *attempts_forgotten_ >= kForgetAttemptsEvery) {
    ForgetAttempts(now);
  }
}

// The lag every second; the counts, which read every pending row, as often as keeps them
// under a twentieth of this connection's time (every second for a backlog of up to about
// 100,000 rows; a million-row backlog is counted about every 10 s).
void RelayUpkeep::ReadGauges(TimePoint now) {
  OutboxDb& db = connections_.db();
  const auto& subjects = connections_.subjects();
  stats_read_ = now;
  floor_.Raise(db, subjects);
  if (now < counts_due_) {
    if (auto lag = db.LagSeconds(floor_.covered(), subjects); lag.ok()) {
      metrics_.lag_seconds.store(*lag);
    }
    return;
  }
  auto stats = db.Stats(floor_.covered(), subjects, floor_.any());
  const auto took = SteadyClock::now() - now;
  counts_due_ = now + std::max<SteadyClock::duration>(kStatsEvery, 20 * took);
  if (!stats.ok()) return;
  metrics_.lag_seconds.store(stats->lag_seconds);
  metrics_.pending_rows.store(stats->pending);
  metrics_.parked_rows.store(stats->parked);
  metrics_.uncovered_pending_rows.store(stats->other_pending);
  metrics_.uncovered_lag_seconds.store(stats->other_lag_seconds);
  WarnUncovered(*stats);
}

void RelayUpkeep::Sweep(TimePoint now) {
  swept_ = now;
  auto dropped = connections_.db().Sweep(options_.retention_days);
  if (!dropped.ok()) {
    log_.Warn("relay", fmt::format("outbox retention sweep: {}", dropped.status().ToString()));
  } else if (*dropped > 0) {
    log_.Info("relay",
              fmt::format("retention dropped {} outbox day partition(s) older than {} days",
                          *dropped, options_.retention_days));
  }
}

void RelayUpkeep::ForgetAttempts(TimePoint now) {
  attempts_forgotten_ = now;
  auto forgotten = connections_.db().ForgetAttempts(options_.claim_lease);
  if (!forgotten.ok()) {
    log_.Warn("relay",
              fmt::format("forgetting settled attempt records: {}", forgotten.status().ToString()));
  } else if (*forgotten > 0) {
    log_.Info("relay", fmt::format("forgot {} attempt record(s) of batches since published again",
                                   *forgotten));
  }
}

void RelayUpkeep::WarnUncovered(const OutboxStats& stats) {
  const auto now = SteadyClock::now();
  if (stats.other_pending == 0 ||
      stats.other_lag_seconds * 1000 < static_cast<double>(options_.warn_uncovered_after.count()) ||
      (uncovered_warned_ && now - *uncovered_warned_ < kUncoveredWarnEvery)) {
    return;
  }
  uncovered_warned_ = now;
  log_.Warn(
      "relay",
      fmt::format("{} pending event(s) on subjects this relay does not take ({}); the oldest, "
                  "event {} on subject '{}', has waited {:.0f} s: if no relay takes it, run one "
                  "whose stream covers it (or park it)",
                  stats.other_pending, Join(connections_.subjects()), stats.other_event_id,
                  stats.other_subject, stats.other_lag_seconds));
}

}  // namespace idem::outbox
