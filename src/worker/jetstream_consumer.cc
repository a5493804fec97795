// The in-process consume loop (include/idem/worker_consumer.h): fetch a batch, and for each
// message BEGIN, claim, handler, COMMIT, then ack. The crash points name the places a SIGKILL
// is tested at.
#include "idem/worker_consumer.h"

#include <libpq-fe.h>

#include <algorithm>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <random>
#include <span>

#include "core/crash_point.h"
#include "core/text.h"
#include "worker/consumer_transactions.h"
#include "worker/dead_letter.h"
#include "worker/delivery_policy.h"
#include "worker/first_failures.h"
#include "worker/jetstream.h"

namespace idem::worker {

std::string_view ConsumedMessage::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (internal::EqualsIgnoreCase(n, name)) return v;
  }
  return {};
}

class JetStreamConsumer::Impl {
 public:
  Impl(Options options, std::string conninfo)
      : options_(WithDefaults(std::move(options))),
        db_(std::move(conninfo), options_.inbox, options_.inbox_consumer),
        limits_{options_.max_deliver, options_.max_retry_time},
        failures_(std::max(Duration(10 * 60 * 1000),
                           4 * (options_.max_nak_delay + options_.ack_wait))) {}

  ~Impl() {
    sub_.reset();
    nats_.reset();
  }

  Status Connect() {
    auto conn = NatsConnection::Connect(
        options_.nats_url, "idem consumer " + options_.stream + "/" + options_.consumer,
        [this](bool connected, const std::string& detail) {
          if (connected) Log("info", "nats: connected to " + detail);
          else if (!stop_) Log("warn", "nats: disconnected (" + detail + "); reconnecting");
        });
    if (!conn.ok()) return conn.status();
    nats_ = std::move(*conn);
    return Status::Ok();
  }

  Status Run(const MessageHandler& handler) {
    const PullConsumerConfig config{options_.stream,  options_.consumer,
                                    options_.filter_subject, options_.ack_wait,
                                    options_.max_ack_pending, options_.max_deliver};
    std::string last_error;
    auto report = [&](const std::string& e) {
      if (e != last_error) Log("warn", e);
      last_error = e;
    };
    auto fatal = [](const Status& s) {
      return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kInvalidArgument ||
             s.code() == StatusCode::kFailedPrecondition;
    };
    bool dead_letter_checked = options_.dead_letter.empty();
    while (!stop_) {
      if (!dead_letter_checked) {
        auto stream = StreamStoring(*nats_, options_.dead_letter);
        if (!stream.ok()) {
          if (fatal(stream.status())) {
            const Status e = stream.status().WithContext("dead_letter " + options_.dead_letter);
            Log("error", e.ToString());
            return e;
          }
          report("cannot check dead_letter " + options_.dead_letter + ": " +
                 stream.status().ToString() + "; retrying every second");
          Pause(std::chrono::milliseconds(1000));
          continue;
        }
        dead_letter_checked = true;
        Log("info", "given-up messages go to " + options_.dead_letter + ", stored by stream " +
                        *stream);
      }
      if (!sub_) {
        std::string note;
        auto bound = PullSubscription::Bind(*nats_, config, &note);
        if (!bound.ok()) {
          if (!ever_bound_ && fatal(bound.status())) {
            Log("error", bound.status().ToString());
            return bound.status();
          }
          report("cannot bind to " + options_.stream + "/" + options_.consumer + ": " +
                 bound.status().ToString() + "; retrying every second");
          Pause(std::chrono::milliseconds(1000));
          continue;
        }
        sub_ = std::move(*bound);
        ever_bound_ = true;
        if (!note.empty()) Log("info", note);
        Log("info", "pulling from " + options_.stream + "/" + options_.consumer +
                        (options_.inbox ? ", inbox '" + options_.inbox_consumer + "'" : ", no inbox"));
      }
      if (Status s = db_.EnsureConnected(); !s.ok()) {
        report("database unavailable: " + s.ToString() + "; retrying");
        Pause(std::chrono::milliseconds(500));
        continue;
      }
      auto fetched = sub_->Fetch(options_.batch, options_.fetch_wait);
      if (!fetched.ok()) {
        const Status& s = fetched.status();
        if (s.code() == StatusCode::kDeadlineExceeded) continue;
        ++errors_;
        if (s.code() == StatusCode::kNotFound) {
          Log("warn", "the consumer is gone (" + s.message() + "); binding again");
          sub_.reset();
          continue;
        }
        report("fetch: " + s.ToString() + "; retrying");
        Pause(std::chrono::milliseconds(200));
        continue;
      }
      last_error.clear();
      fetched_ += fetched->size();
      ApplyBatch(*fetched, handler);
    }
    if (nats_ != nullptr && nats_->connected()) (void)nats_->Flush(std::chrono::milliseconds(2000));
    return Status::Ok();
  }

  void Stop() {
    stop_ = true;
    std::lock_guard lock(mu_);
    cv_.notify_all();
  }

  Stats stats() const {
    return Stats{fetched_.load(),       applied_.load(),       duplicates_.load(),
                 naked_.load(),         termed_.load(),        errors_.load(),
                 limit_reached_.load(), dead_lettered_.load(), dead_letter_failures_.load(),
                 dropped_.load()};
  }

 private:
  using Ending = ConsumerTransactions::Ending;

  static Options WithDefaults(Options options) {
    if (options.inbox_consumer.empty()) options.inbox_consumer = options.consumer;
    return options;
  }

  void Log(std::string_view level, const std::string& line) {
    if (options_.log) {
      options_.log(level, line);
    } else {
      std::cerr << "idem consumer " << level << ": " << line << std::endl;
    }
  }

  void Pause(std::chrono::milliseconds d) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, d, [&] { return stop_.load(); });
  }

  // A failed delivery of `m` (`failure`: what failed, for a dead letter): naked for a
  // redelivery, or given up once a limit is reached. A database that cannot be reached
  // (`unreachable`) never gives a message up.
  void Failed(JsMessage& m, const std::string& why, const char* failure, bool unreachable) {
    GiveUp g;
    g.failure = failure;
    g.why = why;
    g.failing_for = failures_.Failed(m.stream_sequence(), std::chrono::steady_clock::now());
    g.reason = RetryLimitReached(m.delivery_count(), g.failing_for, unreachable, limits_);
    if (g.reason == GiveUpReason::kNone) {
      Nak(m, why);
      return;
    }
    ++limit_reached_;
    GiveUpMessage(m, g);
  }

  // Gives `m` up: publishes it to dead_letter and terminates it; when that publish fails, naks
  // it while no limit is reached (the redelivery tries again), else terminates it without one.
  void GiveUpMessage(JsMessage& m, const GiveUp& g) {
    const std::string given_up =
        GivenUpText(g.reason, m.delivery_count(), g.failing_for, limits_,
                    {"max_deliver", "max_retry_time", "the handler"});
    std::string where;
    if (options_.dead_letter.empty()) {
      ++dropped_;
      where = " (no dead_letter subject: not kept anywhere but stream " + m.stream() + ")";
    } else if (Status dl = PublishDeadLetter(*nats_, options_.dead_letter, m, g); dl.ok()) {
      ++dead_lettered_;
      where = " (published to " + options_.dead_letter + ")";
    } else {
      ++dead_letter_failures_;
      if (RetryDeadLetterByRedelivery(m.delivery_count(), g.failing_for, limits_)) {
        Log("error", Describe(m) + " " + given_up + ": cannot publish to " +
                         options_.dead_letter + ": " + dl.ToString() +
                         "; naked, its redelivery tries again");
        Nak(m, g.why);
        return;
      }
      ++dropped_;
      where = ", and its dead letter could not be published to " + options_.dead_letter + " (" +
              dl.ToString() + "): DROPPED, not kept anywhere but stream " + m.stream() +
              " at sequence " + std::to_string(m.stream_sequence());
    }
    failures_.Forget(m.stream_sequence());
    Settle(m, false);
    ++termed_;
    Log("error", "term " + Describe(m) + " " + given_up + where + ", never redelivered: " + g.why);
  }

  void Nak(JsMessage& m, const std::string& why) {
    uint64_t random = rng_();
    const auto delay = NakDelay(m.delivery_count(), options_.nak_delay, options_.max_nak_delay, random);
    if (Status s = m.Nak(delay); !s.ok()) {
      ++errors_;
      Log("warn", s.ToString() + "; NATS redelivers after ack_wait");
    } else {
      ++naked_;
    }
    Log("warn", "nak " + Describe(m) + ": " + why + "; redelivery in " +
                    std::to_string(delay.count()) + " ms");
  }

  void Settle(JsMessage& m, bool ack) {
    if (ack) failures_.Forget(m.stream_sequence());
    Status s = ack ? m.Ack() : m.Term();
    if (!s.ok()) {
      ++errors_;
      Log("warn", s.ToString() + "; NATS redelivers after ack_wait, and the inbox skips it");
    }
  }

  static std::string Describe(const JsMessage& m) {
    return "key " + m.key() + " (" + m.stream() + " #" + std::to_string(m.stream_sequence()) +
           ", delivery " + std::to_string(m.delivery_count()) + ")";
  }

  // After the COMMIT of `m`'s transaction answered: ack it, or nak it when the COMMIT failed
  // (committed or not, a redelivery is safe: the claim decides).
  void Committed(JsMessage& m, const Status& commit) {
    if (!commit.ok()) {
      ++errors_;
      // A deferred constraint may fail this message's COMMIT every time: it counts.
      Failed(m, commit.message(), "commit", /*unreachable=*/!db_.connected());
      return;
    }
    internal::CrashPoint("runtime.after_commit");
    Settle(m, true);
    ++applied_;
    internal::CrashPoint("runtime.after_ack");
  }

  // Applies a fetched batch: in groups of messages_per_transaction messages when that is more
  // than one (ApplyGroup), a group that fails being applied again one message per transaction.
  void ApplyBatch(std::vector<JsMessage>& batch, const MessageHandler& handler) {
    const size_t group = static_cast<size_t>(options_.messages_per_transaction);
    std::span<JsMessage> rest(batch);
    while (!rest.empty()) {
      const size_t n = std::min(group, rest.size());
      if (n == 1 || !ApplyGroup(rest.first(n), handler)) ApplyEach(rest.first(n), handler);
      rest = rest.subspan(n);
    }
  }

  // Applies `group` in one transaction: BEGIN and the claims in one round trip, the handler of
  // each claimed message in fetch order, COMMIT, then every message's ack (duplicates too: a
  // claim that answered false may have met a claim earlier in this same group, which only the
  // COMMIT makes final). The claims run in key order, so two consumers whose groups overlap
  // (redeliveries) take the pairs' locks in the same order and do not deadlock on them.
  // Returns false with the transaction rolled back and no message settled when a claim, a
  // handler or the COMMIT failed; the caller then applies the group one message at a time,
  // which settles each message on its own outcome.
  bool ApplyGroup(std::span<JsMessage> group, const MessageHandler& handler) {
    std::vector<size_t> order(group.size());  // claim i is for message order[i]
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (options_.inbox) {
      // Stable: of two messages with one key, the first fetched is the one claimed.
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return group[a].key() < group[b].key(); });
    }
    std::vector<std::string_view> keys;
    keys.reserve(order.size());
    for (size_t i : order) keys.push_back(group[i].key());
    Result<std::vector<bool>> answers = db_.BeginAndClaimAll(keys);
    if (!answers.ok()) return GroupFailed(group.size(), answers.status().ToString());
    std::vector<char> claimed(group.size(), 1);
    for (size_t i = 0; i < order.size(); ++i) claimed[order[i]] = (*answers)[i] ? 1 : 0;
    for (size_t i = 0; i < group.size(); ++i) {
      if (!claimed[i]) continue;
      JsMessage& m = group[i];
      const ConsumedMessage view{m.key(),    m.subject(),         m.data(),          m.headers(),
                                 m.stream(), m.stream_sequence(), m.delivery_count()};
      Status handled = handler(db_.conn(), view);
      if (handled.ok() && PQtransactionStatus(db_.conn()) != PQTRANS_INTRANS) {
        handled = InternalError("the handler's transaction failed or was ended");
      }
      if (!handled.ok()) return GroupFailed(group.size(), "handler: " + handled.ToString());
    }
    internal::CrashPoint("runtime.before_commit");
    if (Status commit = db_.Commit(); !commit.ok()) {
      return GroupFailed(group.size(), commit.ToString());
    }
    internal::CrashPoint("runtime.after_commit");
    for (size_t i = 0; i < group.size(); ++i) {
      Settle(group[i], true);
      if (claimed[i]) {
        ++applied_;
      } else {
        ++duplicates_;
      }
      internal::CrashPoint("runtime.after_ack");
    }
    return true;
  }

  // Rolls back a failed group's transaction and says why it is applied again one by one.
  bool GroupFailed(size_t size, const std::string& why) {
    db_.Rollback();
    Log("warn", "a group of " + std::to_string(size) + " messages was rolled back (" + why +
                    "); applying them one per transaction");
    return false;
  }

  // Applies messages one transaction each: BEGIN, claim, handler, COMMIT, ack. A message's
  // COMMIT (or a duplicate's ROLLBACK) travels in the round trip of the next message's BEGIN
  // and claim, so each message costs two round trips besides its handler's statements; its ack
  // follows once that COMMIT answered. The last message's COMMIT goes on its own, so nothing
  // stays open between batches.
  void ApplyEach(std::span<JsMessage> batch, const MessageHandler& handler) {
    JsMessage* committing = nullptr;  // handler done; its COMMIT not yet sent
    Ending ending = Ending::kNone;
    for (JsMessage& m : batch) {
      Status ended = UnavailableError("COMMIT: not sent");
      Result<bool> claimed = db_.BeginAndClaim(m.key(), ending, &ended);
      if (committing != nullptr) Committed(*committing, ended);
      committing = nullptr;
      ending = Ending::kNone;
      if (!claimed.ok()) {
        ++errors_;
        db_.Rollback();
        Nak(m, claimed.status().ToString());  // the database's failure, not the message's
        continue;
      }
      if (!*claimed) {
        // The pair is claimed by a committed transaction: ack now; the claim inserted
        // nothing, so the transaction ends with the next message's round trip.
        ending = Ending::kRollback;
        Settle(m, true);
        ++duplicates_;
        continue;
      }
      const ConsumedMessage view{m.key(),    m.subject(),         m.data(),          m.headers(),
                                 m.stream(), m.stream_sequence(), m.delivery_count()};
      Status handled = handler(db_.conn(), view);
      if (handled.ok() && PQtransactionStatus(db_.conn()) != PQTRANS_INTRANS) {
        handled = InternalError(PQtransactionStatus(db_.conn()) == PQTRANS_INERROR
                                    ? "a statement failed in the handler's transaction"
                                    : "the handler ended the transaction itself");
      }
      if (!handled.ok()) {
        db_.Rollback();
        if (handled.code() == StatusCode::kInvalidArgument) {
          GiveUp g;
          g.reason = GiveUpReason::kRefused;
          g.failure = "handler";
          g.why = handled.ToString();
          g.failing_for =
              failures_.Failed(m.stream_sequence(), std::chrono::steady_clock::now());
          GiveUpMessage(m, g);
        } else {
          Failed(m, "handler: " + handled.ToString(), "handler",
                 /*unreachable=*/!db_.connected());
        }
        continue;
      }
      internal::CrashPoint("runtime.before_commit");
      committing = &m;
      ending = Ending::kCommit;
    }
    if (ending == Ending::kCommit) {
      Status commit = db_.Commit();
      if (!commit.ok()) db_.Rollback();
      Committed(*committing, commit);
    }
    if (ending == Ending::kRollback) db_.Rollback();
  }

  Options options_;
  ConsumerTransactions db_;
  std::unique_ptr<NatsConnection> nats_;
  std::unique_ptr<PullSubscription> sub_;
  bool ever_bound_ = false;
  const RetryLimits limits_;
  FirstFailures failures_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> fetched_{0}, applied_{0}, duplicates_{0}, naked_{0}, termed_{0},
      errors_{0}, limit_reached_{0}, dead_lettered_{0}, dead_letter_failures_{0}, dropped_{0};
};

Result<std::unique_ptr<JetStreamConsumer>> JetStreamConsumer::Create(Options options,
                                                                     std::string pg_conninfo) {
  if (options.stream.empty() || options.consumer.empty()) {
    return InvalidArgumentError("JetStreamConsumer needs a stream and a consumer name");
  }
  if (options.batch < 1 || options.messages_per_transaction < 1 ||
      options.fetch_wait.count() < 1 || options.ack_wait.count() < 1 ||
      options.max_ack_pending < 1) {
    return InvalidArgumentError(
        "JetStreamConsumer: batch, messages_per_transaction, fetch_wait, ack_wait and "
        "max_ack_pending must be positive");
  }
  if (options.max_nak_delay.count() < 0 || options.nak_delay.count() < 0) {
    return InvalidArgumentError("JetStreamConsumer: nak_delay and max_nak_delay must not be negative");
  }
  if (std::string e = ValidRetryLimits({options.max_deliver, options.max_retry_time}); !e.empty()) {
    return InvalidArgumentError("JetStreamConsumer: max_deliver, max_retry_time: " + e);
  }
  if (!options.dead_letter.empty() && !ValidSubject(options.dead_letter, false)) {
    return InvalidArgumentError("JetStreamConsumer: dead_letter '" + options.dead_letter +
                                "' must be a NATS subject without wildcards");
  }
  if (!options.filter_subject.empty() && !ValidSubject(options.filter_subject, true)) {
    return InvalidArgumentError("JetStreamConsumer: filter_subject '" + options.filter_subject +
                                "' must be a NATS subject");
  }
  char* err = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(pg_conninfo.c_str(), &err);
  if (parsed == nullptr) {
    std::string why = err != nullptr ? err : "malformed";
    PQfreemem(err);
    return InvalidArgumentError("JetStreamConsumer: PostgreSQL conninfo: " + why);
  }
  PQconninfoFree(parsed);
  auto impl = std::make_unique<Impl>(std::move(options), std::move(pg_conninfo));
  IDEM_RETURN_IF_ERROR(impl->Connect());
  return std::unique_ptr<JetStreamConsumer>(new JetStreamConsumer(std::move(impl)));
}

JetStreamConsumer::JetStreamConsumer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JetStreamConsumer::~JetStreamConsumer() = default;
Status JetStreamConsumer::Run(const MessageHandler& handler) { return impl_->Run(handler); }
void JetStreamConsumer::Stop() { impl_->Stop(); }
JetStreamConsumer::Stats JetStreamConsumer::stats() const { return impl_->stats(); }

}  // namespace idem::worker
