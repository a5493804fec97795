#include "outbox/relay.h"

#include <fmt/format.h>
#include <unistd.h>

#include <random>

#include "outbox/relay_text.h"

namespace idem::outbox {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

}  // namespace

Relay::Relay(RelayOptions options, logging::Log& log) : options_(std::move(options)), log_(log) {
  if (options_.relay_id.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    options_.relay_id = std::string(host) + ":" + std::to_string(getpid());
  }
  std::random_device random;
  run_nonce_ = fmt::format("{:08x}{:08x}", random(), random());
}

Relay::~Relay() = default;  // the claimer's and the settler's threads end first

std::string Relay::NotReadyReason() const {
  std::string reason;
  if (!metrics_.postgres_up.load()) reason += "postgresql unreachable";
  if (!metrics_.nats_up.load()) reason += std::string(reason.empty() ? "" : "; ") + "nats unreachable";
  return reason;
}

Status Relay::Run() {
  log_.Info("relay", fmt::format("{}: batch {}, max pending {}, claim lease {} ms, poll {} ms",
                                 options_.relay_id, options_.batch, options_.max_pending,
                                 options_.claim_lease.count(), options_.poll_interval.count()));
  while (!stop_.load()) {
    Status connected = conn_.Connect();
    if (!connected.ok()) {
      const StatusCode code = connected.code();
      if (code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound ||
          code == StatusCode::kFailedPrecondition) {
        settler_.Finish();
        return connected;
      }
      metrics_.postgres_up.store(conn_.postgres_up());
      metrics_.nats_up.store(conn_.nats_up());
      backoff_.Failed("connecting", connected);
      continue;
    }
    if (!NatsUp()) continue;
    upkeep_.Run();
    if (PublishOneBatch() || stop_.load()) continue;
    if (!conn_.db().healthy()) continue;
    WaitForEnqueue();
  }
  if (conn_.has_nats()) SettleInFlight();
  GiveBackAhead("relay stopped");
  settler_.Finish();
  log_.Info("relay",
            fmt::format("{}: stopped (published {}, duplicates {}, beyond window {}, "
                        "held back for their keys {})",
                        options_.relay_id, metrics_.published.load(), metrics_.duplicates.load(),
                        metrics_.beyond_window.load(), metrics_.held_back.load()));
  return Status::Ok();
}

bool Relay::NatsUp() {
  const bool nats_up = conn_.nats().connected();
  metrics_.nats_up.store(nats_up);
  if (!nats_up) {
    SettleInFlight();
    GiveBackAhead("not published: nats disconnected");
    if (!nats_down_logged_) {
      log_.Warn("relay",
                fmt::format("nats {} disconnected; waiting for the reconnect (the outbox keeps "
                            "the backlog)",
                            options_.nats_url));
      nats_down_logged_ = true;
    }
    backoff_.SleepFor(milliseconds(250));
    return false;
  }
  if (nats_down_logged_) {
    log_.Info("relay", fmt::format("nats {} reconnected", options_.nats_url));
    nats_down_logged_ = false;
  }
  return true;
}

void Relay::WaitForEnqueue() {
  const auto until = SteadyClock::now() + options_.poll_interval;
  while (!stop_.load() && SteadyClock::now() < until) {
    auto notified = conn_.db().WaitForNotify(RelayBackoff::kSlice);
    if (!notified.ok()) {
      metrics_.postgres_errors.fetch_add(1);
      metrics_.postgres_up.store(false);
      log_.Warn("relay", OneLine(notified.status().ToString()));
      break;
    }
    if (*notified) break;
    metrics_.nats_up.store(conn_.nats().connected());
    upkeep_.Run();
  }
}

Result<HeldBatch> Relay::NextClaimed() {
  if (claimer_.has_ahead()) return claimer_.TakeAhead();
  return claimer_.Lock(floor_.FromStart(), conn_.subjects(), HeldKeyed(nullptr));
}

bool Relay::PublishOneBatch() {
  Result<HeldBatch> claimed = NextClaimed();
  if (!claimed.ok()) {
    return PostgresFailed("not published: a claim failed", "claiming outbox rows",
                          claimed.status());
  }
  metrics_.postgres_up.store(true);
  HeldBatch held = std::move(*claimed);
  if (held.rows.empty()) {
    SettleInFlight();
    return false;
  }
  // Full: the lock's scan reached its limit (with the rows it held back for their keys), so
  // more rows may be waiting; a short batch means the outbox had no more for this relay.
  const bool full = held.full;
  metrics_.ObserveBatch(held.rows.size());
  BatchToPublish batch = messages_.Make(held.rows, *held.db, conn_.facts());
  if (batch.messages.empty()) return CommitUnpublished(held, full, batch.left);
  return Publish(held, std::move(batch), full);
}

bool Relay::CommitUnpublished(HeldBatch& held, bool full, size_t left) {
  auto settled = held.db->SettleBatch("", {}, {}, "");
  if (!settled.ok())
    log_.Warn("relay", fmt::format("parking a batch: {}", OneLine(settled.status().ToString())));
  batch_connections_.Return(std::move(held.db));
  // A batch of rows all left as they were would come back as it is: wait for a change.
  const bool go_on = full && left < held.rows.size();
  if (!go_on) SettleInFlight();
  return go_on;
}

bool Relay::Publish(HeldBatch& held, BatchToPublish prepared, bool full) {
  InFlightBatch batch;
  batch.sent = std::move(prepared.sent);
  batch.keyed = std::move(prepared.keyed);
  // A full batch suggests more are waiting: lock the next ones on connections of their own
  // while this one is published. Locking ahead keeps each key's order: the next lock may take
  // the later rows of the keys of this batch and of the batches still in flight, which go out
  // before it on the same connection, and holds back those of keys anyone else holds (another
  // relay, or rows a lock of this one held back).
  if (full && !stop_.load()) claimer_.ClaimAhead(conn_.subjects(), HeldKeyed(&batch));
  // The first attempt is on record (committed) before anything is published: if this relay
  // dies before the settle, the relay that takes the rows knows how old their first copy is.
  batch.token = NextBatchToken();
  if (Status noted = conn_.db().RecordAttempt(batch.token, prepared.ids); !noted.ok()) {
    claimer_.GiveBack(held);
    return PostgresFailed("not published: recording the attempt failed",
                          "recording a publish attempt", noted);
  }
  // Publish this batch without waiting for its PubAcks, then collect the previous batch's
  // (they arrived meanwhile): the stream always has work, while the locks and settles run.
  batch.id = conn_.nats().Send(prepared.messages, options_.max_pending);
  batch.messages = prepared.messages.size();
  batch.db = std::move(held.db);
  batch.rows = std::move(held.rows);
  std::optional<InFlightBatch> previous = std::move(in_flight_);
  in_flight_ = std::move(batch);
  bool ok = true;
  if (previous) ok = Settle(*previous, conn_.nats().Wait(previous->id));
  // Keep this batch in flight only while all is well and more is coming; else settle it now
  // (an idle relay leaves nothing published and unmarked).
  const bool more = ok && full && !stop_.load() && claimer_.has_ahead();
  if (!more) ok = SettleInFlight() && ok;
  if (!ok) return false;
  backoff_.Reset();
  return more || full;
}

bool Relay::PostgresFailed(const std::string& why, const std::string& what,
                           const Status& status) {
  GiveBackAhead(why);
  metrics_.postgres_errors.fetch_add(1);
  metrics_.postgres_up.store(conn_.db().healthy());
  SettleInFlight();
  backoff_.Failed(what, status);
  return false;
}

void Relay::GiveBackAhead(std::string_view why) {
  const size_t rows = claimer_.GiveBackAhead();
  if (rows > 0) {
    log_.Info("relay", fmt::format("{}: {} rows locked ahead given back ({})", options_.relay_id,
                                   rows, why));
  }
}

bool Relay::SettleInFlight() {
  if (!in_flight_) return true;
  InFlightBatch batch = std::move(*in_flight_);
  in_flight_.reset();
  return Settle(batch, conn_.nats().Wait(batch.id));
}

bool Relay::Settle(InFlightBatch& batch, const std::vector<PublishResult>& results) {
  const BatchSettler::Outcome outcome = settler_.Settle(batch, results, conn_.facts());
  if (outcome.failed == 0) return true;
  // A failed batch stops the pipeline: the batch still in flight is settled too (its rows are
  // marked or given back) and rows locked ahead are given back, before the backoff.
  if (in_flight_) SettleInFlight();
  GiveBackAhead("not published: an earlier batch failed");
  metrics_.publish_errors.fetch_add(outcome.failed);
  backoff_.Failed("publishing " + std::to_string(outcome.failed) + " of " +
                      std::to_string(batch.messages) + " events",
                  UnavailableError(outcome.first_error));
  return false;
}

std::vector<int64_t> Relay::HeldKeyed(const InFlightBatch* current) const {
  std::vector<int64_t> held = settler_.settling_keyed();
  if (in_flight_) held.insert(held.end(), in_flight_->keyed.begin(), in_flight_->keyed.end());
  if (current != nullptr) held.insert(held.end(), current->keyed.begin(), current->keyed.end());
  return held;
}

std::string Relay::NextBatchToken() {
  return fmt::format("{}/{}/{}", options_.relay_id, run_nonce_, ++batches_);
}

}  // namespace idem::outbox
