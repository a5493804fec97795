#include "outbox/relay_connections.h"

#include <fmt/format.h>

#include "outbox/relay_text.h"
#include "outbox/subject_match.h"

namespace idem::outbox {

Status RelayConnections::Connect() {
  if (db_ == nullptr || !db_->healthy()) {
    if (Status connected = ConnectPostgres(); !connected.ok()) return connected;
  }
  if (nats_ == nullptr) {
    auto nats = JetStreamPublisher::Connect(options_.nats_url, options_.ack_timeout,
                                             options_.nats_auth);
    if (!nats.ok() && nats.status().code() == StatusCode::kFailedPrecondition) {
      return FailedPreconditionError(
          "--nats " + options_.nats_url + ": the connection cannot be made (" +
          std::string(nats.status().message()) +
          "); a server that refuses the credentials says so in its log: check "
          "--nats-token-file, --nats-credentials-file or the URL's user");
    }
    if (!nats.ok()) return nats.status();
    nats_ = std::move(*nats);
    log_.Info("relay", fmt::format("connected to nats {}", options_.nats_url));
  }
  if (!facts_) return ReadStream();
  return Status::Ok();
}

Status RelayConnections::ConnectPostgres() {
  db_.reset();
  metrics_.postgres_up.store(false);
  auto db = OutboxDb::Open(options_.db_url, log_);
  if (!db.ok()) {
    metrics_.postgres_errors.fetch_add(1);
    return db.status();
  }
  db_ = std::move(*db);
  metrics_.postgres_up.store(true);
  // A new session may be a new server (a failover to a replica that missed the last
  // commits, a restore): ids may be drawn again below the floor read from the old one.
  floor_.Reset();
  log_.Info("relay",
            fmt::format("{} postgresql {}; listening for enqueues",
                        pg_connected_before_ ? "reconnected to" : "connected to", db_->display()));
  pg_connected_before_ = true;
  return Status::Ok();
}

Status RelayConnections::ReadStream() {
  auto facts = options_.create_stream ? nats_->EnsureStream(*options_.create_stream)
                                      : nats_->ReadStream(options_.stream);
  if (!facts.ok()) return facts.status();
  facts_ = std::move(*facts);
  stream_read_ = std::chrono::steady_clock::now();
  metrics_.duplicate_window_seconds.store(facts_->duplicate_window.count() / 1000.0);
  if (Status applied = ApplySubjects(/*at_start=*/true); !applied.ok()) {
    facts_.reset();
    return applied;
  }
  log_.Info("relay",
            fmt::format("stream {} (subjects {}), duplicate window {} ms, max message {} bytes; "
                        "taking the outbox's rows on {}",
                        facts_->name, Join(facts_->subjects), facts_->duplicate_window.count(),
                        MessageLimit(*facts_), Join(subjects_)));
  WarnAboutWindow();
  return Status::Ok();
}

void RelayConnections::WarnAboutWindow() const {
  if (facts_->duplicate_window.count() > 0 && options_.claim_lease >= facts_->duplicate_window) {
    log_.Warn(
        "relay",
        fmt::format("the claim lease ({} ms) is not below stream {}'s duplicate window "
                    "({} ms): the rows of a relay that hangs will go out again after the broker "
                    "forgot them; lower --claim-lease",
                    options_.claim_lease.count(), facts_->name, facts_->duplicate_window.count()));
  }
  if (facts_->duplicate_window.count() == 0) {
    log_.Warn("relay", fmt::format("stream {} has no duplicate window: the broker will not drop a "
                                   "republished event; only consumers' inboxes will",
                                   facts_->name));
  }
}

void RelayConnections::RereadStream() {
  stream_read_ = std::chrono::steady_clock::now();
  auto facts = nats_->ReadStream(facts_->name);
  if (!facts.ok()) {
    log_.Warn("relay",
              fmt::format("re-reading stream {}: {}", facts_->name, facts.status().ToString()));
    return;
  }
  if (facts->duplicate_window != facts_->duplicate_window) {
    log_.Info("relay", fmt::format("stream {} duplicate window is now {} ms", facts->name,
                                   facts->duplicate_window.count()));
  }
  facts_ = std::move(*facts);
  metrics_.duplicate_window_seconds.store(facts_->duplicate_window.count() / 1000.0);
  (void)ApplySubjects(/*at_start=*/false);
}

Status RelayConnections::ApplySubjects(bool at_start) {
  const StreamFacts& facts = *facts_;
  if (options_.subjects.empty()) {
    if (!at_start && facts.subjects != subjects_) {
      log_.Info("relay", fmt::format("stream {}'s subjects are now {}: taking the rows on them",
                                     facts.name, Join(facts.subjects)));
      floor_.Reset();  // the old subjects' floor says nothing of the new ones' rows
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
    log_.Warn(
        "relay",
        fmt::format("{} any more: its rows are locked and left pending, not published", what));
  }
  return Status::Ok();
}

}  // namespace idem::outbox
