// The sidecar's process: a fetch loop (this thread) that keeps at most max_in_flight messages
// out, an event loop that delivers them over HTTP (one at a time per ordering key:
// ordered_delivery.h), keeps them in progress with NATS and settles each, and the admin
// listener. Shutdown: stop fetching, let the deliveries in flight finish and settle, give held
// messages back, flush.
#include "worker/consume.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_future.hpp>

#include <random>
#include <thread>
#include <unordered_map>

#include "core/text.h"
#include "gateway/access_log.h"
#include "gateway/http.h"
#include "gateway/upstream_pool.h"
#include "idem/mutex.h"
#include "worker/batch_envelope.h"
#include "worker/batch_plan.h"
#include "worker/consume_admin.h"
#include "worker/consume_metrics.h"
#include "worker/crash_point.h"
#include "worker/dead_letter.h"
#include "worker/delivery_policy.h"
#include "worker/first_failures.h"
#include "worker/jetstream.h"
#include "worker/order_recovery.h"
#include "worker/ordered_delivery.h"

namespace idem::worker {
namespace {

using gateway::asio::use_awaitable;
namespace asio = gateway::asio;
namespace http = gateway::http;
using gateway::Request;
using gateway::Response;
using gateway::Task;
using gateway::tcp;
using gateway::UpstreamResult;

// Headers a message may not set on the request: framing, hop-by-hop, and idem's own.
bool ForwardableHeader(std::string_view name, std::string_view value) {
  if (name.empty() || name.size() > 256) return false;
  for (char c : name) {
    const bool token = std::isalnum(static_cast<unsigned char>(c)) ||
                       std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    if (!token) return false;
  }
  for (char c : value) {
    if (c == '\r' || c == '\n' || c == '\0') return false;
  }
  static constexpr std::string_view kReserved[] = {
      "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te",
      "trailer", "upgrade", "proxy-connection", "expect", "idempotency-key"};
  for (std::string_view r : kReserved) {
    if (internal::EqualsIgnoreCase(name, r)) return false;
  }
  return !(name.size() >= 5 && internal::EqualsIgnoreCase(name.substr(0, 5), "idem-"));
}

std::optional<Duration> RetryAfter(const Response& res) {
  const auto it = res.find(http::field::retry_after);
  if (it == res.end()) return std::nullopt;
  const std::string_view v = it->value();
  if (v.empty() || v.size() > 6) return std::nullopt;
  int64_t secs = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    secs = secs * 10 + (c - '0');
  }
  return Duration(secs * 1000);
}

std::string Ms(Duration d) { return std::to_string(d.count()) + " ms"; }

// --batch-size, at most.
constexpr int kMaxBatchSize = 1000;

class Sidecar {
 public:
  Sidecar(const ConsumeOptions& options, gateway::Log& log, asio::io_context& io)
      : options_(options),
        log_(log),
        io_(io),
        ordered_(log, {.max_held = static_cast<size_t>(std::max(1000, 4 * options.max_in_flight)),
                       .give_back_delay = std::min(options.max_nak_delay, Duration(5000))}),
        ack_wait_ms_(options.ack_wait.count()),
        limits_{options.max_deliver, options.max_retry_time},
        // A message retried here comes back within a nak delay (or an ack wait); one not seen
        // failing for much longer than that went elsewhere.
        failures_(std::max(Duration(10 * 60 * 1000),
                           4 * (options.max_nak_delay + options.ack_wait + options.timeout))) {}

  Status Init() {
    const std::string_view kScheme = "http://";
    if (options_.deliver.substr(0, kScheme.size()) != kScheme) {
      return InvalidArgumentError("--deliver '" + options_.deliver +
                                  "' must be http://HOST:PORT/PATH");
    }
    const size_t slash = options_.deliver.find('/', kScheme.size());
    const std::string base = options_.deliver.substr(0, slash);
    path_ = slash == std::string::npos ? "/" : options_.deliver.substr(slash);
    gateway::UpstreamOptions uo;
    uo.connect_timeout = std::min(options_.timeout, Duration(5000));
    uo.response_timeout = options_.timeout;
    uo.max_idle = static_cast<size_t>(options_.max_in_flight);
    uo.max_response_body = 16 << 20;
    auto pool = gateway::UpstreamPool::Create(io_.get_executor(), base, uo);
    if (!pool.ok()) return pool.status().WithContext("--deliver");
    upstream_ = std::move(*pool);

    auto conn = NatsConnection::Connect(
        options_.nats_url, "idem consume " + options_.stream + "/" + options_.consumer,
        [this](bool connected, const std::string& detail) { OnNats(connected, detail); });
    if (!conn.ok()) return conn.status().WithContext("--nats");
    nats_ = std::move(*conn);
    nats_connected_ = nats_->connected();
    if (!nats_connected_) {
      log_.Warn("nats", "cannot reach " + options_.nats_url + " yet; retrying every 250 ms");
    }
    return Status::Ok();
  }

  Status ListenAdmin(tcp::endpoint* bound) {
    admin_ = std::make_unique<ConsumeAdmin>(
        io_, ConsumeAdminState{options_, metrics_, nats_connected_, bound_, stopping_, [this] {
                                 MutexLock lock(mu_);
                                 return static_cast<int64_t>(in_flight_);
                               }});
    return admin_->Listen(bound);
  }

  // The fetch loop; returns OK once stopping and no longer fetching, or what cannot work (a
  // missing stream, a consumer the server refuses to create, a dead-letter subject no stream
  // stores), found before the first bind; NATS being unreachable is waited out.
  Status FetchLoop() {
    PullConsumerConfig config{options_.stream, options_.consumer, options_.filter_subject,
                              options_.ack_wait, options_.max_ack_pending, options_.max_deliver};
    std::string last_bind_error;
    std::string last_fetch_error;
    bool dead_letter_checked = options_.dead_letter.empty();
    auto fatal = [](const Status& s) {
      return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kInvalidArgument ||
             s.code() == StatusCode::kFailedPrecondition;
    };
    while (!stopping_) {
      if ((!dead_letter_checked || !sub_) && !nats_->connected()) {
        // A JetStream request would wait its full timeout (5 s) for nothing; the connection
        // retries every 250 ms by itself.
        WaitStopping(Duration(250));
        continue;
      }
      if (!dead_letter_checked) {
        auto stream = StreamStoring(*nats_, options_.dead_letter);
        if (!stream.ok()) {
          if (fatal(stream.status())) {
            stopping_ = true;
            return stream.status().WithContext("--dead-letter " + options_.dead_letter);
          }
          const std::string e = stream.status().ToString();
          if (e != last_bind_error) {
            log_.Warn("consumer", "cannot check --dead-letter " + options_.dead_letter + ": " + e +
                                      "; retrying every second");
            last_bind_error = e;
          }
          WaitStopping(Duration(1000));
          continue;
        }
        dead_letter_checked = true;
        log_.Info("dead_letter", "given-up messages go to " + options_.dead_letter +
                                     ", stored by stream " + *stream);
      }
      if (!sub_) {
        std::string note;
        auto bound = PullSubscription::Bind(*nats_, config, &note);
        if (!bound.ok()) {
          if (!ever_bound_ && fatal(bound.status())) {
            stopping_ = true;
            return bound.status();
          }
          const std::string e = bound.status().ToString();
          if (e != last_bind_error) {
            log_.Warn("consumer", "cannot bind to " + options_.stream + "/" + options_.consumer +
                                      ": " + e + "; retrying every second");
            last_bind_error = e;
          }
          WaitStopping(Duration(1000));
          continue;
        }
        sub_ = std::move(*bound);
        bound_ = true;
        ever_bound_ = true;
        last_bind_error.clear();
        if (!note.empty()) log_.Info("consumer", note);
        LearnProgress();
        log_.Info("consumer", "pulling from " + options_.stream + "/" + options_.consumer +
                                  ", delivering to " + options_.deliver);
      }
      int room = 0;
      {
        MutexLock lock(mu_);
        // Fetch once half the window is free: one pull request per half window rather than one
        // per settled message keeps the broker round trips off the delivery path.
        while (!stopping_ && in_flight_ > RefetchAt()) cv_.Wait(lock);
        if (stopping_) break;
        room = options_.max_in_flight - in_flight_;
      }
      auto fetched = sub_->Fetch(std::min(room, 256), Duration(1000));
      if (!fetched.ok()) {
        const Status& s = fetched.status();
        if (s.code() == StatusCode::kDeadlineExceeded) continue;
        metrics_.CountError(ConsumeMetrics::kNatsFetch);
        if (s.code() == StatusCode::kNotFound) {
          log_.Warn("consumer", "the consumer is gone (" + s.message() + "); binding again");
          sub_.reset();
          bound_ = false;
          continue;
        }
        if (s.ToString() != last_fetch_error) {
          log_.Warn("fetch", s.ToString() + "; retrying");
          last_fetch_error = s.ToString();
        }
        WaitStopping(Duration(200));
        continue;
      }
      last_fetch_error.clear();
      if (fetched->empty()) continue;
      {
        MutexLock lock(mu_);
        in_flight_ += static_cast<int>(fetched->size());
      }
      metrics_.Count(ConsumeMetrics::kDelivered, fetched->size());
      // One hand-off to the event loop per batch, not one per message: each cross-thread post
      // may wake the loop's thread.
      asio::post(io_, [this, batch = std::make_shared<std::vector<JsMessage>>(
                                 std::move(*fetched))]() { AdmitBatch(std::move(*batch)); });
    }
    return Status::Ok();
  }

  void BeginShutdown(std::string_view why) {
    if (stopping_.exchange(true)) return;
    int n;
    {
      MutexLock lock(mu_);
      n = in_flight_;
    }
    log_.Info("shutdown", std::string(why) + ": no more fetching; finishing " +
                              std::to_string(n) + " message(s) in flight");
    cv_.NotifyAll();
  }

  // Waits (at most the grace period) for the deliveries in flight; returns how many remain.
  int Drain() {
    const Duration grace = options_.shutdown_grace.count() > 0
                               ? options_.shutdown_grace
                               : options_.timeout + Duration(5000);
    MutexLock lock(mu_);
    const auto give_up_at = std::chrono::steady_clock::now() + grace;
    while (in_flight_ != 0 && cv_.WaitUntil(lock, give_up_at)) {
    }
    return in_flight_;
  }

  // After Drain: naks the messages held for their predecessors, so that whoever consumes next
  // gets them at once rather than after ack_wait.
  void GiveBackHeld() {
    const size_t n = asio::post(io_, asio::use_future([this] {
                       const size_t given = ordered_.GiveBackAllHeld();
                       metrics_.set_held(0);
                       return given;
                     })).get();
    if (n > 0) {
      log_.Info("shutdown", std::to_string(n) + " message(s) held for earlier ones of their "
                                "ordering keys given back to NATS");
    }
  }

  Status FlushNats() {
    // Nothing to flush if nothing was ever fetched (NATS never reached, say).
    if (metrics_.count(ConsumeMetrics::kDelivered) == 0) return Status::Ok();
    return nats_->Flush(Duration(2000));
  }
  void CloseNats() {
    polling_.stop();
    polling_.join();
    DestroyFinished();  // the event loop has stopped
    sub_.reset();
    nats_.reset();
  }
  const ConsumeMetrics& metrics() const { return metrics_; }

 private:
  // What one delivery attempt of one message met, before the retry limits are applied.
  struct Attempt {
    Disposition d = Disposition::kNak;
    std::string why;  // for the nak or term log line
    std::optional<Duration> retry_after;
    GiveUp give_up;            // status, failure and error body, for a dead letter
    bool unreachable = false;  // the service could not be reached at all (never ends a message)
  };

  // Unsettled stream sequences read at each bind to learn which ordering keys an earlier
  // process left messages of, at most.
  static constexpr uint64_t kMaxOutstandingScan = 20000;

  // Settled messages destroyed together, at most (Bury).
  static constexpr size_t kBuryGroup = 32;
  static constexpr size_t kBuryBytes = 1 << 20;

  // The fetch loop fetches again once no more than this many messages are in flight.
  int RefetchAt() const { return options_.max_in_flight / 2; }

  void WaitStopping(Duration d) {
    MutexLock lock(mu_);
    const auto give_up_at = std::chrono::steady_clock::now() + d;
    while (!stopping_ && cv_.WaitUntil(lock, give_up_at)) {
    }
  }

  void OnNats(bool connected, const std::string& detail) {
    nats_connected_ = connected;
    if (connected) {
      log_.Info("nats", "connected to " + detail);
    } else if (stopping_) {
      // Our own close at shutdown (or a loss during it): what is unsettled is said elsewhere.
      log_.Info("nats", "disconnected from " + options_.nats_url + " (shutting down)");
    } else {
      log_.Warn("nats", "disconnected from " + options_.nats_url +
                            (detail.empty() ? "" : " (" + detail + ")") +
                            "; reconnecting; unsettled messages come back after ack_wait");
    }
  }

  // After each bind (fetch loop): the consumer's actual ack_wait (the in-progress period) and
  // the ordering keys of the messages an earlier process may have left unsettled, so that their
  // successors wait for them (KeyOrder). Starts the in-progress and ack-floor loops once.
  void LearnProgress() {
    auto progress = ReadConsumerProgress(*nats_, options_.stream, options_.consumer);
    if (!progress.ok()) {
      log_.Warn("order", "cannot read the consumer's progress: " + progress.status().ToString() +
                             "; messages an earlier process left unsettled may be overtaken "
                             "by later ones of their ordering keys");
    }
    std::vector<KeyOrder::Keyed> outstanding;
    if (progress.ok()) {
      if (progress->ack_wait.count() > 0) ack_wait_ms_ = progress->ack_wait.count();
      const uint64_t first = progress->ack_floor + 1;
      const uint64_t last = progress->delivered;
      if (last >= first) {
        uint64_t read_up_to = 0;
        auto keyed = ReadOrderingKeys(*nats_, options_.stream, progress->filter_subject, first,
                                      last, kMaxOutstandingScan, &read_up_to);
        const std::string range = "#" + std::to_string(first) + "..#" + std::to_string(last);
        if (!keyed.ok()) {
          log_.Warn("order", "cannot read " + range + ": " + keyed.status().ToString() +
                                 "; messages an earlier process left unsettled may be "
                                 "overtaken by later ones of their ordering keys");
        } else {
          outstanding = std::move(*keyed);
          if (read_up_to < last) {
            log_.Warn("order", "read only #" + std::to_string(first) + "..#" +
                                   std::to_string(read_up_to) + " of the unsettled range " +
                                   range + "; later messages of keys found only beyond it may "
                                   "overtake earlier ones");
          }
          if (!outstanding.empty()) {
            log_.Info("order", std::to_string(outstanding.size()) + " message(s) with an "
                                   "ordering key in " + range + " may still be unsettled (an "
                                   "earlier process had them); later messages of those keys "
                                   "wait until they are acked or terminated");
          }
        }
      }
    }
    asio::post(io_, [this, outstanding = std::move(outstanding)] {
      ordered_.LearnOutstanding(outstanding);
      if (!ticking_) {
        ticking_ = true;
        asio::co_spawn(io_, KeepInProgress(), asio::detached);
        asio::co_spawn(io_, PollAckFloor(), asio::detached);
      }
    });
  }

  // A fetched batch (event loop): each message is delivered now or held for its predecessor.
  void AdmitBatch(std::vector<JsMessage> batch) {
    std::vector<std::shared_ptr<JsMessage>> now;
    for (JsMessage& m : batch) {
      for (auto& d : ordered_.Admit(std::make_shared<JsMessage>(std::move(m)))) {
        now.push_back(std::move(d));
      }
    }
    metrics_.set_held(static_cast<int64_t>(ordered_.held()));
    // The fetch loop counted the whole batch in flight; held messages are not.
    if (const int not_now = static_cast<int>(batch.size()) - static_cast<int>(now.size());
        not_now != 0) {
      {
        MutexLock lock(mu_);
        in_flight_ -= not_now;
      }
      cv_.NotifyAll();
    }
    Start(std::move(now));
  }

  // Messages released by a settle or the ack floor (event loop): delivered, unless stopping.
  void Launch(std::vector<std::shared_ptr<JsMessage>> messages) {
    metrics_.set_held(static_cast<int64_t>(ordered_.held()));
    if (messages.empty()) return;
    if (stopping_) {
      for (const auto& m : messages) ordered_.GiveBack(m);
      log_.Info("shutdown", std::to_string(messages.size()) + " message(s) whose predecessor "
                                "just ended given back to NATS, not delivered while stopping");
      return;
    }
    {
      MutexLock lock(mu_);
      in_flight_ += static_cast<int>(messages.size());
    }
    Start(std::move(messages));
  }

  // Messages now in flight (event loop): one POST each; with --batch-size above 1, queued and
  // sent in batches cut from everything that becomes ready before the loop's next turn (no
  // waiting for more).
  void Start(std::vector<std::shared_ptr<JsMessage>> messages) {
    if (options_.batch_size <= 1) {
      for (auto& m : messages) asio::co_spawn(io_, Dispatch(std::move(m)), asio::detached);
      return;
    }
    if (messages.empty()) return;
    for (auto& m : messages) ready_.push_back(std::move(m));
    if (flush_posted_) return;
    flush_posted_ = true;
    asio::post(io_, [this] { SendReady(); });
  }

  void SendReady() {
    flush_posted_ = false;
    std::vector<std::shared_ptr<JsMessage>> ready;
    ready.swap(ready_);
    std::vector<std::optional<std::string>> ordering_keys;
    ordering_keys.reserve(ready.size());
    std::vector<BatchCandidate> candidates;
    candidates.reserve(ready.size());
    for (const auto& m : ready) {
      ordering_keys.push_back(OrderedDelivery::OrderingKey(*m));
      const auto& ok = ordering_keys.back();
      candidates.push_back({m->key(), ok ? std::optional<std::string_view>(*ok) : std::nullopt,
                            m->stream_sequence()});
    }
    for (const auto& plan : PlanBatches(candidates, static_cast<size_t>(options_.batch_size))) {
      std::vector<std::shared_ptr<JsMessage>> batch;
      batch.reserve(plan.size());
      for (size_t i : plan) batch.push_back(ready[i]);
      asio::co_spawn(io_, DispatchBatch(std::move(batch)), asio::detached);
    }
  }

  // One delivery, kept in progress with JetStream until settled, then whatever of its ordering
  // key may go next.
  Task<void> Dispatch(std::shared_ptr<JsMessage> m) {
    working_.emplace(m.get(), m);
    Attempt a = co_await Deliver(*m);
    co_await Finish(std::move(m), std::move(a));
  }

  // One batch POST; then each message is settled on its own, as its item's answer says, exactly
  // as a message delivered alone (Finish), without waiting for the others' dead letters.
  Task<void> DispatchBatch(std::vector<std::shared_ptr<JsMessage>> batch) {
    for (const auto& m : batch) working_.emplace(m.get(), m);
    std::vector<Attempt> attempts = co_await DeliverBatch(batch);
    for (size_t i = 0; i < batch.size(); ++i) {
      asio::co_spawn(io_, Finish(std::move(batch[i]), std::move(attempts[i])), asio::detached);
    }
  }

  // After a delivery attempt: the retry limits, the dead letter, the settle with NATS, the
  // window, then whatever of its ordering key may go next.
  Task<void> Finish(std::shared_ptr<JsMessage> m, Attempt a) {
    co_await Settle(*m, std::move(a));
    working_.erase(m.get());
    Launch(ordered_.AfterSettle(*m));
    Bury(std::move(m));
  }

  // A settled message, destroyed later with others: nats.c hands every destroyed message to its
  // garbage-collector thread and wakes that thread when its list was empty, so destroying them
  // one at a time would wake it (and contend for its lock) about once per message. They go in
  // groups of kBuryGroup, or of kBuryBytes, and whenever no delivery is left to settle.
  void Bury(std::shared_ptr<JsMessage> m) {
    finished_bytes_ += m->data().size();
    finished_.push_back(std::move(m));
    if (finished_.size() >= kBuryGroup || finished_bytes_ >= kBuryBytes || working_.empty()) {
      DestroyFinished();
    }
  }
  void DestroyFinished() {
    finished_.clear();
    finished_bytes_ = 0;
  }

  // Every third of the consumer's ack_wait, tells JetStream that every message being delivered
  // or held is still in progress, so it never redelivers one of them meanwhile.
  Task<void> KeepInProgress() {
    asio::steady_timer timer(io_);
    size_t last_failed = 0;
    for (;;) {
      timer.expires_after(std::max(std::chrono::milliseconds(50),
                                   std::chrono::milliseconds(ack_wait_ms_.load() / 3)));
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
      size_t failed = ordered_.TouchHeld();
      for (auto& [ptr, m] : working_) failed += m->InProgress().ok() ? 0 : 1;
      if (failed > 0 && last_failed == 0) {
        log_.Warn("in_progress", "cannot tell NATS that " + std::to_string(failed) +
                                     " message(s) are still in progress; they may be "
                                     "redelivered after ack_wait");
      }
      last_failed = failed;
    }
  }

  // While messages are held and sequences not in this process's hands are outstanding, reads
  // the consumer's ack floor (ten times a second): what lies at or below it is settled, and its
  // successors go. Each read may release the messages whose acks move the floor past the next
  // such sequence, so a slower pace would add up over a chain of them after a restart.
  Task<void> PollAckFloor() {
    asio::steady_timer timer(io_);
    for (;;) {
      timer.expires_after(std::chrono::milliseconds(100));
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
      if (ordered_.awaiting() == 0 || ordered_.held() == 0 || !bound_ || stopping_) continue;
      co_await asio::post(polling_, use_awaitable);
      auto progress = ReadConsumerProgress(*nats_, options_.stream, options_.consumer);
      co_await asio::post(io_.get_executor(), use_awaitable);
      if (progress.ok()) Launch(ordered_.AdvanceAckFloor(progress->ack_floor));
    }
  }

  Task<Attempt> Deliver(const JsMessage& m) {
    Request req{http::verb::post, path_, 11};
    bool content_type = false;
    for (const auto& [name, value] : m.headers()) {
      if (!ForwardableHeader(name, value)) continue;
      if (internal::EqualsIgnoreCase(name, "content-type")) content_type = true;
      req.insert(name, value);
    }
    if (!content_type) req.set(http::field::content_type, "application/octet-stream");
    req.set("Idempotency-Key", m.key());
    req.set("Idem-Subject", m.subject());
    req.set("Idem-Delivery-Count", std::to_string(m.delivery_count()));
    req.set("Idem-Stream", m.stream());
    req.set("Idem-Stream-Sequence", std::to_string(m.stream_sequence()));
    if (auto ordering_key = OrderedDelivery::OrderingKey(m)) {
      req.set(kOrderingKeyHeader, *ordering_key);
    }
    req.body() = std::string(m.data());
    const UpstreamResult r = co_await Exchange(req);
    if (r.failure != UpstreamResult::Failure::kNone) co_return FailedExchange(r);
    Attempt a;
    a.give_up.status = r.response.result_int();
    a.give_up.failure = "http";
    a.d = ClassifyHttpStatus(a.give_up.status);
    if (a.d != Disposition::kAck) {  // the reason is logged only for a nak or a term
      a.why = "HTTP " + std::to_string(a.give_up.status);
      if (a.d == Disposition::kNak) a.retry_after = RetryAfter(r.response);
      if (!r.response.body().empty()) a.why += ": " + r.response.body().substr(0, 200);
      a.give_up.error_body = r.response.body().substr(0, kDeadLetterBodyBytes);
    }
    co_return a;
  }

  // One POST of `batch` as a JSON envelope (batch_envelope.h); an Attempt per message, in
  // order. docs/worker.md ("Batch delivery") lists the rules: a transport failure or a non-2xx
  // answer applies to every message (any non-2xx naks: the envelope itself may be what was
  // refused); a 2xx answer that cannot be used naks every message; an item left out is naked.
  Task<std::vector<Attempt>> DeliverBatch(const std::vector<std::shared_ptr<JsMessage>>& batch) {
    std::vector<std::optional<std::string>> ordering_keys;
    ordering_keys.reserve(batch.size());
    std::vector<BatchItem> items;
    items.reserve(batch.size());
    std::vector<std::string_view> keys;
    keys.reserve(batch.size());
    for (const auto& m : batch) {
      ordering_keys.push_back(OrderedDelivery::OrderingKey(*m));
      BatchItem item{m->key(), m->subject(), m->stream(), m->stream_sequence(),
                     m->delivery_count(), std::nullopt, {}, m->data()};
      if (ordering_keys.back()) item.ordering_key = *ordering_keys.back();
      for (const auto& [name, value] : m->headers()) {
        if (ForwardableHeader(name, value)) item.headers.emplace_back(name, value);
      }
      items.push_back(std::move(item));
      keys.push_back(m->key());
    }
    Request req{http::verb::post, path_, 11};
    req.set(http::field::content_type, "application/json");
    req.set(kBatchHeader, std::to_string(batch.size()));
    req.body() = EncodeBatch(items);
    const UpstreamResult r = co_await Exchange(req);
    if (r.failure != UpstreamResult::Failure::kNone) {
      co_return std::vector<Attempt>(batch.size(), FailedExchange(r));
    }
    const int status = r.response.result_int();
    const std::string& body = r.response.body();
    const std::string batch_of = "a batch of " + std::to_string(batch.size());
    if (status / 100 != 2) {
      Attempt a;
      a.give_up.status = status;
      a.give_up.failure = "http";
      a.why = batch_of + " answered HTTP " + std::to_string(status);
      if (!body.empty()) a.why += ": " + body.substr(0, 200);
      a.retry_after = RetryAfter(r.response);
      a.give_up.error_body = body.substr(0, kDeadLetterBodyBytes);
      co_return std::vector<Attempt>(batch.size(), a);
    }
    auto results = DecodeBatchResults(body, keys);
    if (!results.ok()) {
      metrics_.CountError(ConsumeMetrics::kBatchResponse);
      log_.Warn("batch", batch_of + " answered HTTP " + std::to_string(status) + " with a body " +
                             "that cannot be used (" + results.status().message() +
                             "); every message of it is naked");
      Attempt a;
      a.give_up.status = status;
      a.give_up.failure = "batch-response";
      a.why = "unusable batch response: " + results.status().message();
      a.give_up.error_body = body.substr(0, kDeadLetterBodyBytes);
      co_return std::vector<Attempt>(batch.size(), a);
    }
    const std::optional<Duration> retry_after = RetryAfter(r.response);
    std::vector<Attempt> out(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      ItemResult& item = (*results)[i];
      Attempt& a = out[i];
      a.give_up.status = status;
      a.give_up.failure = "batch-item";
      const std::string error = item.error.empty() ? "" : ": " + item.error.substr(0, 200);
      switch (item.outcome) {
        case ItemResult::Outcome::kAck:
          a.d = Disposition::kAck;
          break;
        case ItemResult::Outcome::kRetry:
          a.d = Disposition::kNak;
          a.retry_after = item.retry_after ? item.retry_after : retry_after;
          a.why = "the service answered retry" + error;
          break;
        case ItemResult::Outcome::kReject:
          a.d = Disposition::kTerm;
          a.why = "the service answered reject" + error;
          break;
        case ItemResult::Outcome::kMissing:
          a.d = Disposition::kNak;
          a.retry_after = retry_after;
          a.give_up.failure = "batch-response";
          a.why = "left out of the answer to " + batch_of;
          break;
      }
      a.give_up.error_body = std::move(item.error);
      if (a.give_up.error_body.size() > kDeadLetterBodyBytes) {
        a.give_up.error_body.resize(kDeadLetterBodyBytes);
      }
    }
    co_return out;
  }

  // One POST to the service, timed.
  Task<UpstreamResult> Exchange(Request& req) {
    const auto start = std::chrono::steady_clock::now();
    UpstreamResult r = co_await upstream_->Exchange(req, options_.timeout);
    metrics_.delivery_seconds().Observe(std::chrono::duration<double>(
        std::chrono::steady_clock::now() - start).count());
    co_return r;
  }

  // The attempt of a POST that got no usable HTTP answer, counted once per POST.
  Attempt FailedExchange(const UpstreamResult& r) {
    Attempt a;
    switch (r.failure) {
      case UpstreamResult::Failure::kTimeout:
        metrics_.CountError(ConsumeMetrics::kTimeout);
        a.why = "no answer within " + Ms(options_.timeout) + " (" + r.detail + ")";
        a.give_up.failure = "timeout";
        break;
      case UpstreamResult::Failure::kConnect:
        metrics_.CountError(ConsumeMetrics::kConnect);
        a.why = r.detail;
        a.give_up.failure = "connect";
        a.unreachable = true;
        break;
      case UpstreamResult::Failure::kTooLarge:
        metrics_.CountError(ConsumeMetrics::kTooLarge);
        a.why = "answer larger than 16 MiB (" + r.detail + ")";
        a.give_up.failure = "too-large";
        break;
      default:
        metrics_.CountError(ConsumeMetrics::kBroken);
        a.why = r.detail;
        a.give_up.failure = "broken";
        break;
    }
    return a;
  }

  // One message's attempt settled: a failure counts against the retry limits and may give it
  // up (dead letter, then term); then ack, nak or term with NATS, and the window is freed.
  Task<void> Settle(JsMessage& m, Attempt a) {
    Disposition d = a.d;
    GiveUp& give_up = a.give_up;
    std::string term_note;
    if (d == Disposition::kAck) {
      failures_.Forget(m.stream_sequence());
    } else {
      give_up.failing_for =
          failures_.Failed(m.stream_sequence(), std::chrono::steady_clock::now());
      give_up.reason = d == Disposition::kTerm
                           ? GiveUpReason::kRefused
                           : RetryLimitReached(m.delivery_count(), give_up.failing_for,
                                               a.unreachable, limits_);
      if (give_up.reason != GiveUpReason::kNone) {
        give_up.why = a.why;
        if (give_up.reason != GiveUpReason::kRefused) metrics_.Count(ConsumeMetrics::kLimitReached);
        d = co_await DeadLetter(m, give_up, &term_note);
        if (d == Disposition::kTerm) failures_.Forget(m.stream_sequence());
      }
    }
    SettleWithNats(m, d, a.why, a.retry_after, term_note);
    bool wake;
    {
      MutexLock lock(mu_);
      --in_flight_;
      // The fetch loop waits for half the window to free up, and Drain for none in flight:
      // wake them at those two points only, not at every settled message.
      wake = in_flight_ == RefetchAt() || in_flight_ == 0;
    }
    if (wake) cv_.NotifyAll();
  }

  // `term_note` says why a terminated message was given up and where it went.
  void SettleWithNats(JsMessage& m, Disposition d, const std::string& why,
                      std::optional<Duration> retry_after, const std::string& term_note) {
    // The message, for the log lines (an ack that succeeds logs none).
    auto what = [&m] {
      return "key " + m.key() + " (" + m.stream() + " #" + std::to_string(m.stream_sequence()) +
             ", delivery " + std::to_string(m.delivery_count()) + ")";
    };
    Status s;
    switch (d) {
      case Disposition::kAck:
        CrashPoint("consume.after_response");
        s = m.Ack();
        if (s.ok()) metrics_.Count(ConsumeMetrics::kAcked);
        CrashPoint("consume.after_ack");
        break;
      case Disposition::kNak: {
        uint64_t random;
        {
          MutexLock lock(mu_);
          random = rng_();
        }
        Duration delay = retry_after ? std::min(*retry_after, options_.max_nak_delay)
                                     : NakDelay(m.delivery_count(), options_.nak_delay,
                                                options_.max_nak_delay, random);
        s = m.Nak(delay);
        if (s.ok()) metrics_.Count(ConsumeMetrics::kNaked);
        log_.Warn("nak", what() + ": " + why + "; redelivery in " + Ms(delay));
        break;
      }
      case Disposition::kTerm:
        s = m.Term();
        if (s.ok()) metrics_.Count(ConsumeMetrics::kTermed);
        log_.Error("term", what() + " " + term_note + ", never redelivered: " + why);
        break;
    }
    if (!s.ok()) {
      metrics_.CountError(ConsumeMetrics::kAckFailed);
      log_.Warn("settle", what() + ": " + std::string(DispositionName(d)) + " failed: " +
                              s.ToString() + "; the message will be redelivered after ack_wait");
    }
  }

  // Gives `m` up: publishes it to --dead-letter (off the event loop: the publish waits for the
  // stream's answer) and returns kTerm, or kNak when that publish failed and a redelivery may
  // try again (RetryDeadLetterByRedelivery). Without --dead-letter, or at the limit, the message
  // is terminated without a copy: counted (outcome "dropped") and logged as an error.
  // `*term_note` receives what the term log line says.
  Task<Disposition> DeadLetter(JsMessage& m, const GiveUp& g, std::string* term_note) {
    std::string given_up;
    switch (g.reason) {
      case GiveUpReason::kMaxDeliver:
        given_up = "given up after " + std::to_string(m.delivery_count()) +
                   " failed deliveries (--max-deliver " + std::to_string(limits_.max_deliver) + ")";
        break;
      case GiveUpReason::kMaxRetryTime:
        given_up = "given up after failing for " + Ms(g.failing_for) + " (--max-retry-time " +
                   Ms(limits_.max_retry_time) + ")";
        break;
      default:
        given_up = "refused by the service";
        break;
    }
    if (options_.dead_letter.empty()) {
      metrics_.Count(ConsumeMetrics::kDropped);
      *term_note = given_up + " (no --dead-letter subject: not kept anywhere but stream " +
                   m.stream() + ")";
      co_return Disposition::kTerm;
    }
    co_await asio::post(blocking_, use_awaitable);
    Status dl = PublishDeadLetter(*nats_, options_.dead_letter, m, g);
    co_await asio::post(io_.get_executor(), use_awaitable);
    if (dl.ok()) {
      metrics_.Count(ConsumeMetrics::kDeadLettered);
      *term_note = given_up + " (published to " + options_.dead_letter + ")";
      co_return Disposition::kTerm;
    }
    metrics_.CountError(ConsumeMetrics::kDeadLetterFailed);
    if (RetryDeadLetterByRedelivery(m.delivery_count(), g.failing_for, limits_)) {
      log_.Error("dead_letter", "key " + m.key() + " " + given_up + ": cannot publish to " +
                                    options_.dead_letter + ": " + dl.ToString() +
                                    "; naked, its redelivery tries again");
      co_return Disposition::kNak;
    }
    metrics_.Count(ConsumeMetrics::kDropped);
    *term_note = given_up + ", and its dead letter could not be published to " +
                 options_.dead_letter + " (" + dl.ToString() + "): DROPPED, not kept anywhere "
                 "but stream " + m.stream() + " at sequence " + std::to_string(m.stream_sequence());
    co_return Disposition::kTerm;
  }

  const ConsumeOptions& options_;
  gateway::Log& log_;
  asio::io_context& io_;
  asio::thread_pool blocking_{1};
  std::string path_;
  std::unique_ptr<gateway::UpstreamPool> upstream_;
  std::unique_ptr<NatsConnection> nats_;
  std::unique_ptr<PullSubscription> sub_;  // the fetch loop's
  std::unique_ptr<ConsumeAdmin> admin_;
  ConsumeMetrics metrics_;
  // The event loop's: per-key order, the messages being delivered, whether the in-progress and
  // ack-floor loops run.
  OrderedDelivery ordered_;
  std::unordered_map<JsMessage*, std::shared_ptr<JsMessage>> working_;
  std::vector<std::shared_ptr<JsMessage>> ready_;  // --batch-size: waiting for SendReady
  bool flush_posted_ = false;                       // SendReady is posted
  std::vector<std::shared_ptr<JsMessage>> finished_;  // settled, destroyed together (Bury)
  size_t finished_bytes_ = 0;                          // their bodies' size
  bool ticking_ = false;
  asio::thread_pool polling_{1};       // consumer-info requests, off the event loop
  std::atomic<int64_t> ack_wait_ms_;  // the consumer's own, once bound
  std::atomic<bool> stopping_{false};
  std::atomic<bool> nats_connected_{false};
  std::atomic<bool> bound_{false};
  bool ever_bound_ = false;  // the fetch loop's
  const RetryLimits limits_;
  FirstFailures failures_;
  Mutex mu_;
  CondVar cv_;
  int in_flight_ IDEM_GUARDED_BY(mu_) = 0;
  std::mt19937_64 rng_ IDEM_GUARDED_BY(mu_){std::random_device{}()};
};

}  // namespace

int RunConsume(const ConsumeOptions& in) {
  gateway::Log log(in.log_json);
  ConsumeOptions options = in;
  auto fail = [&](const std::string& message) {
    log.Error("config", message);
    log.Flush();
    return 2;
  };
  if (options.stream.empty() || options.consumer.empty() || options.deliver.empty()) {
    return fail("--stream, --consumer and --deliver are required");
  }
  if (options.max_in_flight < 1) return fail("--max-in-flight must be at least 1");
  if (options.max_ack_pending < 1) return fail("--max-ack-pending must be at least 1");
  if (options.batch_size < 1 || options.batch_size > kMaxBatchSize) {
    return fail("--batch-size must be 1 to " + std::to_string(kMaxBatchSize));
  }
  if (options.timeout.count() < 1) return fail("--timeout must be positive");
  if (!options.dead_letter.empty() && !ValidSubject(options.dead_letter, /*wildcards=*/false)) {
    return fail("--dead-letter '" + options.dead_letter +
                "' must be a NATS subject without wildcards (tokens separated by '.')");
  }
  if (!options.filter_subject.empty() && !ValidSubject(options.filter_subject, true)) {
    return fail("--filter-subject '" + options.filter_subject +
                "' must be a NATS subject (tokens separated by '.', '*' for one token, a final "
                "'>' for the rest)");
  }
  if (std::string e = ValidRetryLimits({options.max_deliver, options.max_retry_time}); !e.empty()) {
    return fail("--max-deliver " + std::to_string(options.max_deliver) + ", --max-retry-time " +
                Ms(options.max_retry_time) + ": " + e);
  }
  if (options.ack_wait.count() == 0) {
    options.ack_wait = std::max(Duration(30000), options.timeout * 2);
  }
  // A delivery may outlast ack_wait: it is kept in progress (every third of ack_wait) until the
  // service answers or --timeout passes. Below a second, those acks would be too many and a
  // short pause of the process would let NATS redeliver.
  if (options.ack_wait < Duration(1000)) {
    return fail("--ack-wait (" + Ms(options.ack_wait) + ") must be at least 1 s");
  }
  if (options.batch_size > options.max_in_flight) {
    log.Warn("config", "--batch-size " + std::to_string(options.batch_size) +
                           " is above --max-in-flight; a batch holds at most " +
                           std::to_string(options.max_in_flight) + " messages");
  }
  if (options.max_ack_pending < options.max_in_flight) {
    log.Warn("config", "--max-ack-pending " + std::to_string(options.max_ack_pending) +
                           " is below --max-in-flight; at most that many are in flight");
  }

  // One event-loop thread runs every delivery and the admin listener: an exchange is a few
  // microseconds of work between waits, and the upstream pool's streams need no strand.
  asio::io_context io(1);
  auto work = asio::make_work_guard(io);
  Sidecar sidecar(options, log, io);
  if (Status s = sidecar.Init(); !s.ok()) return fail(s.ToString());
  std::string admin_text = "no admin listener";
  if (!options.admin_listen.empty()) {
    tcp::endpoint bound;
    if (Status s = sidecar.ListenAdmin(&bound); !s.ok()) return fail(s.ToString());
    admin_text = "admin on " + bound.address().to_string() + ":" + std::to_string(bound.port());
  }
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (!ec) sidecar.BeginShutdown(signal == SIGTERM ? "SIGTERM received" : "SIGINT received");
  });
  std::vector<std::thread> threads;
  threads.emplace_back([&] { io.run(); });
  log.Info("listening", "consume " + options.stream + "/" + options.consumer + " from " +
                            options.nats_url + " to " + options.deliver + ", " + admin_text +
                            ", max in flight " + std::to_string(options.max_in_flight) +
                            (options.batch_size > 1
                                 ? ", batches of up to " + std::to_string(options.batch_size)
                                 : std::string()) +
                            ", timeout " + Ms(options.timeout) + ", ack wait " +
                            Ms(options.ack_wait) + ", max deliver " +
                            std::to_string(options.max_deliver) + ", max retry time " +
                            Ms(options.max_retry_time) + ", dead letters " +
                            (options.dead_letter.empty() ? "logged only" : "to " + options.dead_letter));

  const Status fatal = sidecar.FetchLoop();
  if (!fatal.ok()) log.Error("config", fatal.ToString());
  const int left = sidecar.Drain();
  sidecar.GiveBackHeld();
  Status flushed = sidecar.FlushNats();
  if (left > 0) {
    log.Warn("shutdown", std::to_string(left) + " delivery(ies) still running after the grace "
                             "period; NATS redelivers them after ack_wait");
  }
  if (!flushed.ok()) log.Warn("shutdown", "acks may not have reached NATS: " + flushed.ToString());
  work.reset();
  io.stop();
  for (auto& t : threads) t.join();
  sidecar.CloseNats();
  const ConsumeMetrics& m = sidecar.metrics();
  log.Info("stopped", std::to_string(m.count(ConsumeMetrics::kDelivered)) + " delivered, " +
                          std::to_string(m.count(ConsumeMetrics::kAcked)) + " acked, " +
                          std::to_string(m.count(ConsumeMetrics::kNaked)) + " naked, " +
                          std::to_string(m.count(ConsumeMetrics::kTermed)) + " terminated");
  log.Flush();
  return fatal.ok() ? 0 : 2;
}

}  // namespace idem::worker
