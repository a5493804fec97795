#include "outbox/relay.h"

#include <unistd.h>

#include <algorithm>
#include <random>
#include <thread>

#include <boost/asio/packaged_task.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/crash_point.h"
#include "idem/mutex.h"
#include "idem/outbox.h"
#include "outbox/ordering_key_header.h"
#include "outbox/outbox_db.h"
#include "outbox/subject_match.h"

namespace idem::outbox {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

constexpr auto kStatsEvery = std::chrono::seconds(1);
constexpr auto kStreamEvery = std::chrono::seconds(30);
constexpr auto kSweepEvery = std::chrono::hours(1);
constexpr auto kForgetAttemptsEvery = std::chrono::minutes(1);
constexpr milliseconds kSlice{100};
constexpr int kMaxLoggedPerBatch = 10;
// Batches locked while one is published. One, not two: on two cores a second lock ahead kept
// one more transaction open and cost 3% to 11% more CPU per event, for a lower rate
// (docs/benchmarks.md, "One batch locked ahead").
constexpr int kClaimsAhead = 1;
// A lock ahead may take the next rows of the keys of the batches before it, since they are
// published first on the same connection. Which rows those batches publish is known once they
// are prepared, which is when the next lock starts: with one lock ahead, that is all of them.
static_assert(kClaimsAhead == 1, "a second lock ahead would need the first's rows as held");
constexpr auto kUncoveredWarnEvery = std::chrono::minutes(1);
constexpr uint64_t kFromStartEvery = 8;  // of the batches locked ahead

// Runs `task` on `pool` and returns its result's future.
template <typename F>
auto PostForResult(boost::asio::thread_pool& pool, F task) {
  return boost::asio::post(pool, std::packaged_task<std::invoke_result_t<F&>()>(std::move(task)));
}

// Log lines stay one line: libpq's messages carry newlines and tabs.
std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\t' || c == '\r') c = ' ';
  }
  std::string out;
  for (char c : text) {
    if (!(c == ' ' && !out.empty() && out.back() == ' ')) out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace

struct Relay::Conn {
  std::unique_ptr<OutboxDb> db;  // listens; records attempts; stats and sweep
  std::unique_ptr<JetStreamPublisher> nats;
  std::optional<StreamFacts> facts;
  SteadyClock::time_point stream_read{};
  SteadyClock::time_point stats_read{};
  SteadyClock::time_point counts_due{};
  std::optional<SteadyClock::time_point> swept;
  std::optional<SteadyClock::time_point> attempts_forgotten;
  bool logged_nats_down = false;
  std::optional<SteadyClock::time_point> uncovered_warned;
  std::optional<SteadyClock::time_point> not_taken_warned;  // rows locked the stream refuses
  std::optional<SteadyClock::time_point> own_key_header_noted;  // a row's own Idem-Ordering-Key
  std::optional<OutboxDb::FloorMark> floor_mark;  // taken, its floor not read yet
  bool pg_connected_before = false;
  // Connections for batches, idle (none in a transaction). A batch takes one for its life:
  // locked ahead, published, settled in the background.
  Mutex pool_mu;
  std::vector<std::unique_ptr<OutboxDb>> pool IDEM_GUARDED_BY(pool_mu);
  // One thread each, for the relay's life (a thread per batch cost a clone and an exit per
  // batch): batches locked ahead, in order, and settles, one at a time.
  boost::asio::thread_pool locker{1};
  boost::asio::thread_pool settler{1};
};

Relay::Relay(RelayOptions options) : options_(std::move(options)), conn_(std::make_unique<Conn>()) {
  if (options_.relay_id.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    options_.relay_id = std::string(host) + ":" + std::to_string(getpid());
  }
  std::random_device random;
  run_nonce_ = fmt::format("{:08x}{:08x}", random(), random());
}

Relay::~Relay() {
  // Their tasks use the relay's members: let them finish while those exist.
  conn_->locker.join();
  conn_->settler.join();
}

std::string Relay::NotReadyReason() const {
  std::string reason;
  if (!metrics_.postgres_up.load()) reason += "postgresql unreachable";
  if (!metrics_.nats_up.load()) reason += std::string(reason.empty() ? "" : "; ") + "nats unreachable";
  return reason;
}

void Relay::SleepFor(milliseconds d) {
  const auto until = SteadyClock::now() + d;
  while (!stop_.load() && SteadyClock::now() < until) {
    std::this_thread::sleep_for(std::min<milliseconds>(
        kSlice, std::chrono::duration_cast<milliseconds>(until - SteadyClock::now()) + milliseconds(1)));
  }
}

void Relay::Backoff(const std::string& what, const Status& status) {
  backoff_ = std::clamp<milliseconds>(backoff_ * 2, milliseconds(100), options_.max_backoff);
  spdlog::warn("relay: {} failed: {}; retrying in {} ms", what, OneLine(status.ToString()),
               backoff_.count());
  SleepFor(backoff_);
}

Status Relay::Connect() {
  Conn& c = *conn_;
  if (c.db == nullptr || !c.db->healthy()) {
    c.db.reset();
    metrics_.postgres_up.store(false);
    auto db = OutboxDb::Open(options_.db_url);
    if (!db.ok()) {
      metrics_.postgres_errors.fetch_add(1);
      return db.status();
    }
    c.db = std::move(*db);
    metrics_.postgres_up.store(true);
    // A new session may be a new server (a failover to a replica that missed the last
    // commits, a restore): ids may be drawn again below the floor read from the old one.
    ResetFloor();
    spdlog::info("relay: {} postgresql {}; listening for enqueues",
                 c.pg_connected_before ? "reconnected to" : "connected to", c.db->display());
    c.pg_connected_before = true;
  }
  if (c.nats == nullptr) {
    auto nats = JetStreamPublisher::Connect(options_.nats_url, options_.ack_timeout,
                                             options_.nats_auth);
    if (!nats.ok()) return nats.status();
    c.nats = std::move(*nats);
    spdlog::info("relay: connected to nats {}", options_.nats_url);
  }
  if (!c.facts) {
    auto facts = options_.create_stream ? c.nats->EnsureStream(*options_.create_stream)
                                        : c.nats->ReadStream(options_.stream);
    if (!facts.ok()) return facts.status();
    c.facts = std::move(*facts);
    c.stream_read = SteadyClock::now();
    metrics_.duplicate_window_seconds.store(c.facts->duplicate_window.count() / 1000.0);
    if (Status applied = ApplySubjects(/*at_start=*/true); !applied.ok()) {
      c.facts.reset();
      return applied;
    }
    spdlog::info("relay: stream {} (subjects {}), duplicate window {} ms, max message {} bytes; "
                 "taking the outbox's rows on {}",
                 c.facts->name, Join(c.facts->subjects), c.facts->duplicate_window.count(),
                 c.facts->max_msg_size > 0 ? std::min(c.facts->max_msg_size, c.facts->max_payload)
                                           : c.facts->max_payload,
                 Join(subjects_));
    if (c.facts->duplicate_window.count() > 0 && options_.claim_lease >= c.facts->duplicate_window) {
      spdlog::warn("relay: the claim lease ({} ms) is not below stream {}'s duplicate window "
                   "({} ms): the rows of a relay that hangs will go out again after the broker "
                   "forgot them; lower --claim-lease", options_.claim_lease.count(), c.facts->name,
                   c.facts->duplicate_window.count());
    }
    if (c.facts->duplicate_window.count() == 0) {
      spdlog::warn("relay: stream {} has no duplicate window: the broker will not drop a "
                   "republished event; only consumers' inboxes will", c.facts->name);
    }
  }
  return Status::Ok();
}

Status Relay::ApplySubjects(bool at_start) {
  const StreamFacts& facts = *conn_->facts;
  if (options_.subjects.empty()) {
    if (!at_start && facts.subjects != subjects_) {
      spdlog::info("relay: stream {}'s subjects are now {}: taking the rows on them",
                   facts.name, Join(facts.subjects));
      ResetFloor();  // the old subjects' floor says nothing of the new ones' rows
    }
    subjects_ = facts.subjects;
    return Status::Ok();
  }
  subjects_ = options_.subjects;
  for (const auto& subject : options_.subjects) {
    if (AnyPatternCovers(facts.subjects, subject)) continue;
    const std::string what = "--subjects '" + subject + "' is not within stream " + facts.name +
                             "'s subjects (" + Join(facts.subjects) + ")";
    if (at_start) return InvalidArgumentError(what + ": the stream could not store its rows");
    spdlog::warn("relay: {} any more: its rows are locked and left pending, not published",
                 what);
  }
  return Status::Ok();
}

void Relay::WarnUncovered(const OutboxStats& stats) {
  Conn& c = *conn_;
  const auto now = SteadyClock::now();
  if (stats.other_pending == 0 ||
      stats.other_lag_seconds * 1000 < static_cast<double>(options_.warn_uncovered_after.count()) ||
      (c.uncovered_warned && now - *c.uncovered_warned < kUncoveredWarnEvery)) {
    return;
  }
  c.uncovered_warned = now;
  spdlog::warn("relay: {} pending event(s) on subjects this relay does not take ({}); the oldest, "
               "event {} on subject '{}', has waited {:.0f} s: if no relay takes it, run one "
               "whose stream covers it (or park it)",
               stats.other_pending, Join(subjects_), stats.other_event_id, stats.other_subject,
               stats.other_lag_seconds);
}

void Relay::RefreshPeriodic() {
  Conn& c = *conn_;
  const auto now = SteadyClock::now();
  // The lag every second; the counts, which read every pending row, as often as keeps them
  // under a twentieth of this connection's time (every second for a backlog of up to about
  // 100,000 rows; a million-row backlog is counted about every 10 s).
  if (now - c.stats_read >= kStatsEvery) {
    c.stats_read = now;
    RaiseFloor();
    if (now >= c.counts_due) {
      auto stats = c.db->Stats(metrics_.pending_floor.load(), subjects_, any_floor_.load());
      const auto took = SteadyClock::now() - now;
      c.counts_due = now + std::max<SteadyClock::duration>(kStatsEvery, 20 * took);
      if (stats.ok()) {
        metrics_.lag_seconds.store(stats->lag_seconds);
        metrics_.pending_rows.store(stats->pending);
        metrics_.parked_rows.store(stats->parked);
        metrics_.uncovered_pending_rows.store(stats->other_pending);
        metrics_.uncovered_lag_seconds.store(stats->other_lag_seconds);
        WarnUncovered(*stats);
      }
    } else if (auto lag = c.db->LagSeconds(metrics_.pending_floor.load(), subjects_); lag.ok()) {
      metrics_.lag_seconds.store(*lag);
    }
  }
  if (now - c.stream_read >= kStreamEvery) {
    c.stream_read = now;
    auto facts = c.nats->ReadStream(c.facts->name);
    if (facts.ok()) {
      if (facts->duplicate_window != c.facts->duplicate_window) {
        spdlog::info("relay: stream {} duplicate window is now {} ms", facts->name,
                     facts->duplicate_window.count());
      }
      c.facts = std::move(*facts);
      metrics_.duplicate_window_seconds.store(c.facts->duplicate_window.count() / 1000.0);
      (void)ApplySubjects(/*at_start=*/false);
    } else {
      spdlog::warn("relay: re-reading stream {}: {}", c.facts->name, facts.status().ToString());
    }
  }
  if (options_.retention_days > 0 && (!c.swept || now - *c.swept >= kSweepEvery)) {
    c.swept = now;
    auto dropped = c.db->Sweep(options_.retention_days);
    if (dropped.ok()) {
      if (*dropped > 0) {
        spdlog::info("relay: retention dropped {} outbox day partition(s) older than {} days",
                     *dropped, options_.retention_days);
      }
    } else {
      spdlog::warn("relay: outbox retention sweep: {}", dropped.status().ToString());
    }
  }
  // Attempt records of relays that died mid-batch, once their rows went out again.
  if (!c.attempts_forgotten || now - *c.attempts_forgotten >= kForgetAttemptsEvery) {
    c.attempts_forgotten = now;
    auto forgotten = c.db->ForgetAttempts(options_.claim_lease);
    if (!forgotten.ok()) {
      spdlog::warn("relay: forgetting settled attempt records: {}",
                   forgotten.status().ToString());
    } else if (*forgotten > 0) {
      spdlog::info("relay: forgot {} attempt record(s) of batches since published again",
                   *forgotten);
    }
  }
}

// A mark one second, the floor from it the next (or later, while a transaction that was
// running at the mark still runs): the floor rises about every two seconds while rows are
// published. Failures leave the floor where it was, which is always safe.
void Relay::RaiseFloor() {
  Conn& c = *conn_;
  if (!c.floor_mark) {
    auto mark = c.db->MarkFloor();
    if (mark.ok()) c.floor_mark = std::move(*mark);
    return;
  }
  auto floors = c.db->Floors(*c.floor_mark, any_floor_.load(), metrics_.pending_floor.load(),
                             subjects_);
  if (!floors.ok()) {
    spdlog::debug("relay: outbox floor: {}", OneLine(floors.status().ToString()));
    c.floor_mark.reset();
    return;
  }
  if (!floors->has_value()) return;  // a transaction from before the mark still runs
  c.floor_mark.reset();
  const OutboxDb::FloorPair floor = **floors;
  if (floor.any < any_floor_.load() || floor.covered < metrics_.pending_floor.load()) {
    // Only a sequence set back (setval, a restore) lowers them; rows below the old floors may
    // be pending again, and the search for the lowest one started at the old floors.
    spdlog::warn("relay: the outbox's id sequence went back below the floor ({} < {}); "
                 "scanning from the first pending row again",
                 floor.covered, metrics_.pending_floor.load());
    ResetFloor();
    return;
  }
  any_floor_.store(floor.any);
  metrics_.pending_floor.store(floor.covered);
}

void Relay::ResetFloor() {
  conn_->floor_mark.reset();
  any_floor_.store(0);
  metrics_.pending_floor.store(0);
}

int64_t Relay::FromStart() const {
  return std::max<int64_t>(0, metrics_.pending_floor.load() - 1);
}

std::unique_ptr<OutboxDb> Relay::TakeBatchDb(Status& error) {
  Conn& c = *conn_;
  {
    MutexLock lock(c.pool_mu);
    while (!c.pool.empty()) {
      std::unique_ptr<OutboxDb> db = std::move(c.pool.back());
      c.pool.pop_back();
      if (db->healthy()) return db;
    }
  }
  auto opened = OutboxDb::Open(options_.db_url, /*listen=*/false);
  if (!opened.ok()) {
    error = opened.status();
    return nullptr;
  }
  error = (*opened)->LimitIdleHold(options_.claim_lease);
  if (!error.ok()) return nullptr;
  return std::move(*opened);
}

void Relay::ReturnBatchDb(std::unique_ptr<OutboxDb> db) {
  if (db == nullptr || !db->healthy() || db->InTransaction()) return;  // closed here
  MutexLock lock(conn_->pool_mu);
  conn_->pool.push_back(std::move(db));
}

void Relay::GiveBack(HeldBatch& held) {
  if (held.db == nullptr) return;
  held.db->AbandonBatch();
  ReturnBatchDb(std::move(held.db));
}

Result<Relay::HeldBatch> Relay::LockBatch(int64_t after_id,
                                          const std::vector<std::string>& subjects,
                                          const std::vector<int64_t>& held_keyed) {
  Status error;
  HeldBatch held;
  held.db = TakeBatchDb(error);
  if (held.db == nullptr) return error;
  // From after_id; past a scan whose rows were all held back for their keys (its lock is
  // already given back); from the floor once if nothing lay past after_id. Each step starts
  // past the one before, or is that one restart, so this ends.
  const int64_t start = FromStart();
  int64_t after = after_id;
  bool restarted = after_id <= start;
  Result<LockedBatch> locked = LockedBatch{};
  for (;;) {
    locked = held.db->LockBatch(options_.batch, after, subjects, held_keyed, any_floor_.load());
    if (locked.ok()) metrics_.held_back.fetch_add(locked->held_back);
    if (!locked.ok() || !locked->rows.empty() || stop_.load()) break;
    if (locked->full) {
      after = locked->highest_id;
    } else if (!restarted) {
      after = start;
      restarted = true;
    } else {
      break;
    }
  }
  if (!locked.ok()) {
    ReturnBatchDb(std::move(held.db));
    return locked.status();
  }
  held.rows = std::move(locked->rows);
  held.full = locked->full;
  if (held.rows.empty()) {
    ReturnBatchDb(std::move(held.db));  // its transaction already ended
    return held;
  }
  int64_t highest = highest_locked_.load();
  while (highest < locked->highest_id &&
         !highest_locked_.compare_exchange_weak(highest, locked->highest_id)) {
  }
  return held;
}

std::vector<int64_t> Relay::HeldKeyed(const InFlightBatch* current) const {
  std::vector<int64_t> held = settling_keyed_;
  if (in_flight_) held.insert(held.end(), in_flight_->keyed.begin(), in_flight_->keyed.end());
  if (current != nullptr) held.insert(held.end(), current->keyed.begin(), current->keyed.end());
  return held;
}

// Batches locked ahead start past the rows this relay holds already (stepping over rows
// locked by its own other batches would cost about as much as locking them), except every
// kFromStartEvery-th, which starts from the floor (the lowest id a pending row can have): ids
// are not committed in id order, and a row committed late below the others must not wait for
// the pipeline to drain.
void Relay::ClaimAhead(const std::vector<int64_t>& held) {
  while (ahead_.size() < static_cast<size_t>(kClaimsAhead) && !stop_.load()) {
    const bool from_start = ++locks_ahead_ % kFromStartEvery == 0;
    std::shared_future<void> before = ahead_.empty() ? std::shared_future<void>() : ahead_.back().locked;
    auto locked = std::make_shared<std::promise<void>>();
    Ahead next;
    next.locked = locked->get_future().share();
    next.batch = PostForResult(conn_->locker, [this, from_start, before, locked,
                                               subjects = subjects_, held] {
      if (before.valid()) before.wait();
      Result<HeldBatch> batch =
          LockBatch(from_start ? FromStart() : highest_locked_.load(), subjects, held);
      locked->set_value();
      return batch;
    });
    ahead_.push_back(std::move(next));
  }
}

Result<Relay::HeldBatch> Relay::NextClaimed() {
  if (ahead_.empty()) return LockBatch(FromStart(), subjects_, HeldKeyed(nullptr));
  std::future<Result<HeldBatch>> next = std::move(ahead_.front().batch);
  ahead_.pop_front();
  return next.get();
}

void Relay::GiveBackPrefetched(const std::string& why) {
  size_t rows = 0;
  while (!ahead_.empty()) {
    Result<HeldBatch> held = NextClaimed();
    if (!held.ok()) continue;
    rows += held->rows.size();
    GiveBack(*held);
  }
  if (rows > 0) spdlog::debug("relay: {} rows locked ahead given back: {}", rows, why);
}

std::string Relay::NextBatchToken() {
  return fmt::format("{}/{}/{}", options_.relay_id, run_nonce_, ++batches_);
}

bool Relay::PublishOneBatch() {
  Conn& c = *conn_;
  Result<HeldBatch> claimed = NextClaimed();
  if (!claimed.ok()) {
    GiveBackPrefetched("not published: a claim failed");
    metrics_.postgres_errors.fetch_add(1);
    metrics_.postgres_up.store(c.db->healthy());
    SettleInFlight();
    Backoff("claiming outbox rows", claimed.status());
    return false;
  }
  metrics_.postgres_up.store(true);
  HeldBatch held = std::move(*claimed);
  std::vector<ClaimedRow>& rows = held.rows;
  if (rows.empty()) {
    SettleInFlight();
    return false;
  }
  // Full: the lock's scan reached its limit (with the rows it held back for their keys), so
  // more rows may be waiting; a short batch means the outbox had no more for this relay.
  const bool full = held.full;
  metrics_.ObserveBatch(rows.size());
  const StreamFacts& facts = *c.facts;
  const int64_t limit =
      facts.max_msg_size > 0 ? std::min(facts.max_msg_size, facts.max_payload) : facts.max_payload;

  std::vector<OutMessage> messages;
  InFlightBatch batch;
  std::vector<int64_t> ids;
  size_t left = 0;  // rows on subjects the stream does not take
  messages.reserve(rows.size());
  ids.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    ClaimedRow& row = rows[i];
    if (!AnySubjectMatches(facts.subjects, row.subject)) {
      // The lock takes only rows on this relay's subjects, which lie within the stream's; a
      // row outside them (the stream's subjects changed under --subjects) is left as it is,
      // pending, without an attempt: the batch's settle does not touch it.
      const auto now = SteadyClock::now();
      if (!c.not_taken_warned || now - *c.not_taken_warned >= kUncoveredWarnEvery) {
        c.not_taken_warned = now;
        spdlog::warn("relay: event {} (outbox id {}) on subject '{}' is not covered by stream "
                     "{} (subjects {}): left pending, not published",
                     row.event_id, row.id, row.subject, facts.name, Join(facts.subjects));
      }
      ++left;
      continue;
    }
    if (row.attempts > 1) metrics_.reclaimed.fetch_add(1);
    // The row's ordering key as Idem-Ordering-Key, replacing a header of that name the row
    // set itself (the key wins; rows without a key carry none).
    if (SetOrderingKeyHeader(row.headers, row.ordering_key)) {
      const auto now = SteadyClock::now();
      if (!c.own_key_header_noted || now - *c.own_key_header_noted >= kUncoveredWarnEvery) {
        c.own_key_header_noted = now;
        spdlog::info("relay: event {} (outbox id {}) set the header {} itself: dropped, the "
                     "relay sets it from the row's ordering key ({}) (logged at most once a "
                     "minute)",
                     row.event_id, row.id, kOrderingKeyHeader,
                     row.ordering_key ? "it has one" : "it has none, so the message carries none");
      }
    }
    OutMessage m{row.event_id, row.subject, std::move(row.payload), std::move(row.headers)};
    if (const int64_t size = EncodedSize(m); limit > 0 && size > limit) {
      const std::string park = "message of " + std::to_string(size) +
                               " bytes exceeds the largest stream " + facts.name + " accepts (" +
                               std::to_string(limit) + " bytes)";
      metrics_.CountParked(ParkReason::kTooLarge);
      spdlog::error("relay: parked event {} (outbox id {}): {}", row.event_id, row.id, park);
      auto parked = held.db->Park(row, park);
      if (!parked.ok()) spdlog::warn("relay: parking event {}: {}", row.event_id, parked.ToString());
      continue;
    }
    messages.push_back(std::move(m));
    ids.push_back(row.id);
    batch.sent.push_back(i);
    if (row.keyed) batch.keyed.push_back(row.id);
  }
  if (messages.empty()) {  // every row parked (or left): commit that
    auto settled = held.db->SettleBatch("", {}, {}, "");
    if (!settled.ok()) spdlog::warn("relay: parking a batch: {}", OneLine(settled.status().ToString()));
    ReturnBatchDb(std::move(held.db));
    // A batch of rows all left as they were would come back as it is: wait for a change.
    const bool go_on = full && left < rows.size();
    if (!go_on) SettleInFlight();
    return go_on;
  }

  // A full batch suggests more are waiting: lock the next ones on connections of their own
  // while this one is published, kClaimsAhead at a time. Locking ahead keeps each key's order:
  // the next lock may take the later rows of the keys of this batch and of the batches still
  // in flight, which go out before it on the same connection, and holds back those of keys
  // anyone else holds (another relay, or rows a lock of this one held back).
  if (full && !stop_.load()) ClaimAhead(HeldKeyed(&batch));
  // The first attempt is on record (committed) before anything is published: if this relay
  // dies before the settle, the relay that takes the rows knows how old their first copy is.
  batch.token = NextBatchToken();
  if (Status noted = c.db->RecordAttempt(batch.token, ids); !noted.ok()) {
    GiveBack(held);
    GiveBackPrefetched("not published: recording the attempt failed");
    metrics_.postgres_errors.fetch_add(1);
    metrics_.postgres_up.store(c.db->healthy());
    SettleInFlight();
    Backoff("recording a publish attempt", noted);
    return false;
  }
  // Publish this batch without waiting for its PubAcks, then collect the previous batch's
  // (they arrived meanwhile): the stream always has work, while the locks and settles run.
  batch.id = c.nats->Send(messages, options_.max_pending);
  batch.messages = messages.size();
  batch.db = std::move(held.db);
  batch.rows = std::move(rows);
  std::optional<InFlightBatch> previous = std::move(in_flight_);
  in_flight_ = std::move(batch);
  bool ok = true;
  if (previous) ok = Settle(*previous, c.nats->Wait(previous->id));
  // Keep this batch in flight only while all is well and more is coming; else settle it now
  // (an idle relay leaves nothing published and unmarked).
  const bool more = ok && full && !stop_.load() && !ahead_.empty();
  if (!more) ok = SettleInFlight() && ok;
  if (!ok) return false;
  backoff_ = milliseconds(0);
  return more || full;
}

bool Relay::SettleInFlight() {
  if (!in_flight_) return true;
  InFlightBatch batch = std::move(*in_flight_);
  in_flight_.reset();
  return Settle(batch, conn_->nats->Wait(batch.id));
}

bool Relay::Settle(InFlightBatch& batch, const std::vector<PublishResult>& results) {
  const StreamFacts& facts = *conn_->facts;
  const bool db_usable = batch.db != nullptr && batch.db->healthy();
  std::vector<PublishedRow> acked;
  std::vector<RowKey> failed;
  std::string first_error;
  uint64_t duplicates = 0;
  int beyond_logged = 0;
  acked.reserve(results.size());
  for (size_t i = 0; i < results.size() && i < batch.sent.size(); ++i) {
    const PublishResult& r = results[i];
    const ClaimedRow& row = batch.rows[batch.sent[i]];
    switch (r.kind) {
      case PublishResult::Kind::kAcked:
        acked.push_back({row.id, row.day, r.stream_seq, r.duplicate});
        if (r.duplicate) ++duplicates;
        // Counted when the stream took the copy, not when the row was claimed: an attempt that
        // failed (NATS away) and was given back is tried again, and is one republish, not two.
        if (row.attempts > 1 && facts.duplicate_window.count() > 0 &&
            row.first_attempt_age_ms > facts.duplicate_window.count()) {
          metrics_.beyond_window.fetch_add(1);
          if (beyond_logged++ < kMaxLoggedPerBatch) {
            spdlog::warn("relay: event {} was published again {} ms after its first attempt, "
                         "beyond stream {}'s duplicate window of {} ms: the broker cannot drop a "
                         "copy it may already hold; consumers' inboxes must",
                         row.event_id, row.first_attempt_age_ms, facts.name,
                         facts.duplicate_window.count());
          }
        }
        break;
      case PublishResult::Kind::kRejected: {
        metrics_.CountParked(ParkReason::kRejected);
        const std::string why = "rejected by stream " + facts.name + ": " + r.error;
        spdlog::error("relay: parked event {} (outbox id {}): {}", row.event_id, row.id, why);
        if (db_usable) {
          auto parked = batch.db->Park(row, why);
          if (!parked.ok()) spdlog::warn("relay: parking event {}: {}", row.event_id, parked.ToString());
        } else {
          spdlog::warn("relay: parking event {}: postgresql unreachable (the row is tried again)",
                       row.event_id);
        }
        break;
      }
      case PublishResult::Kind::kFailed:
        failed.push_back({row.id, row.day});
        if (first_error.empty()) first_error = r.error;
        break;
    }
  }
  if (beyond_logged > kMaxLoggedPerBatch) {
    spdlog::warn("relay: {} events of this batch were beyond the duplicate window", beyond_logged);
  }
  // Published, never marked: killed here, or hung here holding the rows (core/crash_point.h).
  if (!acked.empty()) internal::CrashPoint("relay.after_publish");
  const size_t failed_count = failed.size();
  // Until the settle commits, the acknowledged rows stay pending, held by its transaction, and
  // a lock may take their keys' next rows: they are in the stream already.
  settling_keyed_.clear();
  for (size_t i = 0; i < results.size() && i < batch.sent.size(); ++i) {
    const ClaimedRow& row = batch.rows[batch.sent[i]];
    if (row.keyed && results[i].kind == PublishResult::Kind::kAcked) {
      settling_keyed_.push_back(row.id);
    }
  }
  SettleInBackground(std::move(batch.db), std::move(batch.token), std::move(acked),
                     std::move(failed), first_error, duplicates);
  if (failed_count == 0) return true;
  // A failed batch stops the pipeline: the batch still in flight is settled too (its rows are
  // marked or given back) and rows locked ahead are given back, before the backoff.
  if (in_flight_) SettleInFlight();
  GiveBackPrefetched("not published: an earlier batch failed");
  metrics_.publish_errors.fetch_add(failed_count);
  Backoff("publishing " + std::to_string(failed_count) + " of " +
              std::to_string(batch.messages) + " events",
          UnavailableError(first_error));
  return false;
}

// A batch is settled on its own connection while the loop locks and publishes the next ones:
// the settle is off the critical path. At most one runs at a time; the batch's rows stay
// locked (and a later event of their ordering key stays blocked) until it commits, so order
// and safety are as if it were inline. A settle that fails rolls back: the rows are free at
// once and go out again, as duplicates the stream drops.
void Relay::SettleInBackground(std::unique_ptr<OutboxDb> db, std::string token,
                               std::vector<PublishedRow> acked, std::vector<RowKey> failed,
                               std::string error, uint64_t duplicates) {
  FinishMarking();
  marking_ = PostForResult(conn_->settler, [this, db = std::move(db), token = std::move(token),
                                            acked = std::move(acked), failed = std::move(failed),
                                            error = std::move(error), duplicates]() mutable {
    if (db == nullptr) {
      MarkFailed(acked.size(), UnavailableError("the batch's connection is gone"));
      return;
    }
    auto settled = db->SettleBatch(token, acked, failed, error);
    if (!settled.ok()) {
      MarkFailed(acked.size(), settled.status());
    } else {
      metrics_.published.fetch_add(acked.size());
      metrics_.duplicates.fetch_add(duplicates);
    }
    ReturnBatchDb(std::move(db));
  });
}

void Relay::MarkFailed(size_t rows, const Status& status) {
  // Published but not marked: the transaction holding the rows is gone, so they are free and
  // go out again at once; within the duplicate window the stream drops the copies (PubAck
  // duplicate: true).
  metrics_.postgres_errors.fetch_add(1);
  metrics_.postgres_up.store(false);
  spdlog::warn("relay: {} events published but not marked ({}); they will be republished, "
               "as duplicates the stream drops",
               rows, OneLine(status.ToString()));
}

void Relay::FinishMarking() {
  if (marking_.valid()) marking_.get();
}

Status Relay::Run() {
  spdlog::info("relay {}: batch {}, max pending {}, claim lease {} ms, poll {} ms",
               options_.relay_id, options_.batch, options_.max_pending, options_.claim_lease.count(),
               options_.poll_interval.count());
  while (!stop_.load()) {
    Status connected = Connect();
    if (!connected.ok()) {
      const StatusCode code = connected.code();
      if (code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound ||
          code == StatusCode::kFailedPrecondition) {
        FinishMarking();
        return connected;
      }
      metrics_.postgres_up.store(conn_->db != nullptr && conn_->db->healthy());
      metrics_.nats_up.store(conn_->nats != nullptr && conn_->nats->connected());
      Backoff("connecting", connected);
      continue;
    }
    const bool nats_up = conn_->nats->connected();
    metrics_.nats_up.store(nats_up);
    if (!nats_up) {
      SettleInFlight();
      GiveBackPrefetched("not published: nats disconnected");
      if (!conn_->logged_nats_down) {
        spdlog::warn("relay: nats {} disconnected; waiting for the reconnect (the outbox keeps "
                     "the backlog)", options_.nats_url);
        conn_->logged_nats_down = true;
      }
      SleepFor(milliseconds(250));
      continue;
    }
    if (conn_->logged_nats_down) {
      spdlog::info("relay: nats {} reconnected", options_.nats_url);
      conn_->logged_nats_down = false;
    }
    RefreshPeriodic();
    if (PublishOneBatch() || stop_.load()) continue;
    if (!conn_->db->healthy()) continue;
    // Caught up: wait for an enqueue notification, or the poll interval.
    const auto until = SteadyClock::now() + options_.poll_interval;
    while (!stop_.load() && SteadyClock::now() < until) {
      auto notified = conn_->db->WaitForNotify(kSlice);
      if (!notified.ok()) {
        metrics_.postgres_errors.fetch_add(1);
        metrics_.postgres_up.store(false);
        spdlog::warn("relay: {}", OneLine(notified.status().ToString()));
        break;
      }
      if (*notified) break;
      metrics_.nats_up.store(conn_->nats->connected());
      RefreshPeriodic();
    }
  }
  if (conn_->nats != nullptr) SettleInFlight();
  GiveBackPrefetched("relay stopped");
  FinishMarking();
  spdlog::info("relay {}: stopped (published {}, duplicates {}, beyond window {}, held back "
               "for their keys {})",
               options_.relay_id, metrics_.published.load(), metrics_.duplicates.load(),
               metrics_.beyond_window.load(), metrics_.held_back.load());
  return Status::Ok();
}

}  // namespace idem::outbox
