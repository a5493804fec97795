// The fetch loop's thread: binding, fetching and handing messages to the event loop; NATS's
// connection state; the loops that keep messages in progress and follow the ack floor.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>

#include "worker/consume_sidecar.h"
#include "worker/dead_letter.h"
#include "worker/order_recovery.h"

namespace idem::worker {
namespace {

// What no retry can fix: the fetch loop ends with it (before the first bind).
bool FatalAtStart(const Status& s) {
  return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kInvalidArgument ||
         s.code() == StatusCode::kFailedPrecondition;
}

}  // namespace

Sidecar::Sidecar(const ConsumeOptions& options, logging::Log& log, asio::io_context& io)
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

Status Sidecar::Init() {
  const std::string_view kScheme = "http://";  // CheckOptions refused any other
  const size_t slash = options_.deliver.find('/', kScheme.size());
  const std::string base = options_.deliver.substr(0, slash);
  path_ = slash == std::string::npos ? "/" : options_.deliver.substr(slash);
  ServiceClientOptions so;
  so.connect_timeout = std::min(options_.timeout, Duration(5000));
  so.response_timeout = options_.timeout;
  so.max_idle = static_cast<size_t>(options_.max_in_flight);
  so.max_response_body = 16 << 20;
  auto client = ServiceClient::Create(io_, base, so);
  if (!client.ok()) return client.status().WithContext("--deliver");
  service_ = std::move(*client);

  auto conn = NatsConnection::Connect(
      options_.nats_url, "idem consume " + options_.stream + "/" + options_.consumer,
      [this](bool connected, const std::string& detail) { OnNats(connected, detail); },
      options_.nats_auth);
  if (!conn.ok()) return conn.status().WithContext("--nats");
  nats_ = std::move(*conn);
  nats_connected_ = nats_->connected();
  if (!nats_connected_) {
    log_.Warn("nats", "cannot reach " + options_.nats_url + " yet; retrying every 250 ms");
  }
  return Status::Ok();
}

Status Sidecar::ListenAdmin(std::string* address) {
  admin_ = std::make_unique<ConsumeAdmin>(
      io_, ConsumeAdminState{options_, metrics_, nats_connected_, bound_, stopping_, [this] {
                               MutexLock lock(mu_);
                               return static_cast<int64_t>(in_flight_);
                             }});
  return admin_->Listen(address);
}

Status Sidecar::FetchLoop() {
  FetchState state{.dead_letter_checked = options_.dead_letter.empty()};
  while (!stopping_) {
    if ((!state.dead_letter_checked || !sub_) && !nats_->connected()) {
      if (auto why = ever_bound_ ? std::nullopt : nats_->GaveUp()) {
        stopping_ = true;
        return FailedPreconditionError(
            "--nats " + options_.nats_url + ": the connection cannot be made (" + *why +
            "); a server that refuses the credentials says so in its log: check "
            "--nats-token-file, --nats-credentials-file or the URL's user");
      }
      // A JetStream request would wait its full timeout (5 s) for nothing; the connection
      // retries every 250 ms by itself.
      WaitStopping(Duration(250));
      continue;
    }
    if (!state.dead_letter_checked) {
      if (Status s = CheckDeadLetter(state); !s.ok()) return s;
      if (!state.dead_letter_checked) continue;
    }
    if (!sub_) {
      if (Status s = BindConsumer(state); !s.ok()) return s;
      if (!sub_) continue;
    }
    FetchOnce(state);
  }
  return Status::Ok();
}

Status Sidecar::CheckDeadLetter(FetchState& state) {
  auto stream = StreamStoring(*nats_, options_.dead_letter);
  if (!stream.ok()) {
    if (FatalAtStart(stream.status())) {
      stopping_ = true;
      return stream.status().WithContext("--dead-letter " + options_.dead_letter);
    }
    const std::string e = stream.status().ToString();
    if (e != state.last_bind_error) {
      log_.Warn("consumer", "cannot check --dead-letter " + options_.dead_letter + ": " + e +
                                "; retrying every second");
      state.last_bind_error = e;
    }
    WaitStopping(Duration(1000));
    return Status::Ok();
  }
  state.dead_letter_checked = true;
  log_.Info("dead_letter", "given-up messages go to " + options_.dead_letter +
                               ", stored by stream " + *stream);
  return Status::Ok();
}

Status Sidecar::BindConsumer(FetchState& state) {
  const PullConsumerConfig config{options_.stream,          options_.consumer,
                                  options_.filter_subject,  options_.ack_wait,
                                  options_.max_ack_pending, options_.max_deliver};
  std::string note;
  auto bound = PullSubscription::Bind(*nats_, config, &note);
  if (!bound.ok()) {
    if (!ever_bound_ && FatalAtStart(bound.status())) {
      stopping_ = true;
      return bound.status();
    }
    const std::string e = bound.status().ToString();
    if (e != state.last_bind_error) {
      log_.Warn("consumer", "cannot bind to " + options_.stream + "/" + options_.consumer +
                                ": " + e + "; retrying every second");
      state.last_bind_error = e;
    }
    WaitStopping(Duration(1000));
    return Status::Ok();
  }
  sub_ = std::move(*bound);
  bound_ = true;
  ever_bound_ = true;
  state.last_bind_error.clear();
  if (!note.empty()) log_.Info("consumer", note);
  LearnProgress();
  log_.Info("consumer", "pulling from " + options_.stream + "/" + options_.consumer +
                            ", delivering to " + options_.deliver);
  return Status::Ok();
}

void Sidecar::FetchOnce(FetchState& state) {
  int room = 0;
  {
    MutexLock lock(mu_);
    // Fetch once a quarter of the capacity is free: one pull request per quarter rather than
    // one per settled message, and the messages fetched ahead keep the window full meanwhile.
    while (!stopping_ && in_flight_ > RefetchAt()) cv_.Wait(lock);
    if (stopping_) return;
    room = Capacity() - in_flight_;
  }
  auto fetched = sub_->Fetch(std::min(room, 256), Duration(1000));
  if (!fetched.ok()) {
    const Status& s = fetched.status();
    if (s.code() == StatusCode::kDeadlineExceeded) return;
    metrics_.CountError(ConsumeMetrics::kNatsFetch);
    if (s.code() == StatusCode::kNotFound) {
      log_.Warn("consumer", "the consumer is gone (" + s.message() + "); binding again");
      sub_.reset();
      bound_ = false;
      return;
    }
    if (s.ToString() != state.last_fetch_error) {
      log_.Warn("fetch", s.ToString() + "; retrying");
      state.last_fetch_error = s.ToString();
    }
    WaitStopping(Duration(200));
    return;
  }
  state.last_fetch_error.clear();
  if (fetched->empty()) return;
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

void Sidecar::BeginShutdown(std::string_view why) {
  if (stopping_.exchange(true)) return;
  int n;
  {
    MutexLock lock(mu_);
    n = in_flight_;
  }
  log_.Info("shutdown", std::string(why) + ": no more fetching; finishing " +
                            std::to_string(n) + " message(s) in flight");
  cv_.NotifyAll();
  asio::post(io_, [this] { GiveBackWaiting(); });
}

int Sidecar::Drain() {
  const Duration grace = options_.shutdown_grace.count() > 0
                             ? options_.shutdown_grace
                             : options_.timeout + Duration(5000);
  MutexLock lock(mu_);
  const auto give_up_at = std::chrono::steady_clock::now() + grace;
  while (in_flight_ != 0 && cv_.WaitUntil(lock, give_up_at)) {
  }
  return in_flight_;
}

void Sidecar::GiveBackHeld() {
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

Status Sidecar::FlushNats() {
  // Nothing to flush if nothing was ever fetched (NATS never reached, say).
  if (metrics_.count(ConsumeMetrics::kDelivered) == 0) return Status::Ok();
  return nats_->Flush(Duration(2000));
}

void Sidecar::CloseNats() {
  polling_.stop();
  polling_.join();
  DestroyFinished();  // the event loop has stopped
  freeing_.join();
  sub_.reset();
  nats_.reset();
}

void Sidecar::WaitStopping(Duration d) {
  MutexLock lock(mu_);
  const auto give_up_at = std::chrono::steady_clock::now() + d;
  while (!stopping_ && cv_.WaitUntil(lock, give_up_at)) {
  }
}

void Sidecar::OnNats(bool connected, const std::string& detail) {
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

void Sidecar::LearnProgress() {
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

Task<void> Sidecar::KeepInProgress() {
  asio::steady_timer timer(io_);
  size_t last_failed = 0;
  for (;;) {
    timer.expires_after(std::max(std::chrono::milliseconds(50),
                                 std::chrono::milliseconds(ack_wait_ms_.load() / 3)));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
    size_t failed = ordered_.TouchHeld();
    for (const auto& slot : deliverers_) {
      if (slot->message) failed += slot->message->InProgress().ok() ? 0 : 1;
    }
    for (auto& [ptr, m] : working_) failed += m->InProgress().ok() ? 0 : 1;
    for (auto& m : waiting_) failed += m->InProgress().ok() ? 0 : 1;
    if (failed > 0 && last_failed == 0) {
      log_.Warn("in_progress", "cannot tell NATS that " + std::to_string(failed) +
                                   " message(s) are still in progress; they may be "
                                   "redelivered after ack_wait");
    }
    last_failed = failed;
  }
}

Task<void> Sidecar::PollAckFloor() {
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

}  // namespace idem::worker
