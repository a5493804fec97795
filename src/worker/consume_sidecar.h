// The `idem consume` process (internal to it): a fetch loop (the caller's thread,
// consume_fetch.cc) keeps up to twice max_in_flight messages out (the window being delivered
// and as many fetched ahead) and hands them to an event loop that delivers them
// (consume_dispatch.cc: one at a time per ordering key, ordered_delivery.h), POSTs them to the
// service (consume_http.cc), keeps them in progress with NATS and settles each
// (consume_settle.cc). consume.cc checks the options and runs start-up and shutdown: stop
// fetching, let the deliveries in flight finish and settle, give held and fetched-ahead
// messages back, flush.
//
// Thread safety: the public methods say which thread calls them; everything else runs on the
// event loop (one thread), except what mu_ guards and the atomics.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>

#include "core/mutex.h"
#include "idem/status.h"
#include "log/event_log.h"
#include "worker/consume.h"
#include "worker/consume_admin.h"
#include "worker/consume_metrics.h"
#include "worker/consume_park.h"
#include "worker/dead_letter.h"
#include "worker/delivery_policy.h"
#include "worker/first_failures.h"
#include "worker/jetstream.h"
#include "worker/ordered_delivery.h"
#include "worker/service_client.h"

namespace idem::worker {

namespace asio = boost::asio;
namespace http = boost::beast::http;
template <typename T>
using Task = asio::awaitable<T>;
using tcp = asio::ip::tcp;
using asio::use_awaitable;

// "250 ms", for log lines.
inline std::string Ms(Duration d) { return std::to_string(d.count()) + " ms"; }

class Sidecar {
 public:
  Sidecar(const ConsumeOptions& options, logging::Log& log, asio::io_context& io);

  // Before the event loop runs: the service's address and the NATS connection (which keeps
  // trying on its own while NATS cannot be reached). REQUIRES: options passed
  // CheckConsumeOptions (--deliver is http://...); kInvalidArgument for a host it cannot use.
  Status Init();
  // Before the event loop runs: the admin listener on options.admin_listen.
  Status ListenAdmin(std::string* address);

  // The fetch loop (the caller's thread); returns OK once stopping and no longer fetching, or
  // what cannot work (a missing stream, a consumer the server refuses to create, a dead-letter
  // subject no stream stores), found before the first bind; NATS being unreachable is waited out.
  Status FetchLoop();

  // Any thread: stop fetching; the deliveries in flight go on.
  void BeginShutdown(std::string_view why);
  // Waits (at most the grace period) for the deliveries in flight; returns how many remain.
  int Drain();
  // After Drain: naks the messages held for their predecessors, so that whoever consumes next
  // gets them at once rather than after ack_wait.
  void GiveBackHeld();
  Status FlushNats();
  // After the event loop has stopped.
  void CloseNats();
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
  // A deliverer's (Deliverer) state: the message it delivers (null while idle), its request and
  // answer (kept for the next message: their storage is reused) and where it waits for the next
  // message.
  struct DeliverySlot {
    std::shared_ptr<JsMessage> message;
    std::string request;
    ServiceAnswer answer;
    ParkedCoroutine parked;
  };
  // The fetch loop's own state across its turns.
  struct FetchState {
    bool dead_letter_checked = false;
    std::string last_bind_error;   // logged once until it changes
    std::string last_fetch_error;  // logged once until it changes
  };

  // Unsettled stream sequences read at each bind to learn which ordering keys an earlier
  // process left messages of, at most.
  static constexpr uint64_t kMaxOutstandingScan = 20000;
  // Settled messages destroyed together, at most (Bury).
  static constexpr size_t kBuryGroup = 128;
  static constexpr size_t kBuryBytes = 1 << 20;

  // Messages in the sidecar's hands, not held for order, at most: the --max-in-flight being
  // delivered plus as many fetched ahead (waiting_), so that a pull round trip to NATS never
  // leaves the window short: a slot freed by a settle is refilled at once from waiting_.
  int Capacity() const { return 2 * options_.max_in_flight; }
  // The fetch loop fetches again once no more than this many messages are in its hands: a
  // quarter of the capacity per pull request.
  int RefetchAt() const { return Capacity() - std::max(1, Capacity() / 4); }

  // --- consume_fetch.cc: the fetch loop's steps (its thread) and NATS's state ---------------
  // Each returns a fatal Status, or OK with the step done or to be tried again (after a wait).
  Status CheckDeadLetter(FetchState& state);
  Status BindConsumer(FetchState& state);
  // Waits for room in the window, fetches and hands what came to the event loop.
  void FetchOnce(FetchState& state);
  void WaitStopping(Duration d);
  void OnNats(bool connected, const std::string& detail);
  // After each bind (fetch loop): the consumer's actual ack_wait (the in-progress period) and
  // the ordering keys of the messages an earlier process may have left unsettled, so that their
  // successors wait for them (KeyOrder). Starts the in-progress and ack-floor loops once.
  void LearnProgress();
  // Every third of the consumer's ack_wait, tells JetStream that every message being delivered
  // or held is still in progress, so it never redelivers one of them meanwhile.
  Task<void> KeepInProgress();
  // While messages are held and sequences not in this process's hands are outstanding, reads
  // the consumer's ack floor (ten times a second): what lies at or below it is settled, and its
  // successors go. Each read may release the messages whose acks move the floor past the next
  // such sequence, so a slower pace would add up over a chain of them after a restart.
  Task<void> PollAckFloor();

  // --- consume_dispatch.cc: from fetched to settled (event loop) -----------------------------
  // A fetched batch: each message is delivered now or held for its predecessor.
  void AdmitBatch(std::vector<JsMessage> batch);
  // Messages released by a settle or the ack floor: delivered, unless stopping.
  void Launch(std::vector<std::shared_ptr<JsMessage>> messages);
  // Messages that may be delivered now: they wait (waiting_, in the order given) for a slot of
  // the --max-in-flight window, then Pump starts them.
  void Start(std::vector<std::shared_ptr<JsMessage>> messages);
  // Fills the window from waiting_: one POST each, by an idle deliverer (a new one while fewer
  // than --max-in-flight exist); with --batch-size above 1, queued and sent in batches cut from
  // everything that becomes ready before the loop's next turn (no waiting for more). While
  // stopping, gives the waiting messages back instead (GiveBackWaiting).
  void Pump();
  // Naks every waiting message back to NATS at once (stopping: they are not delivered).
  void GiveBackWaiting();
  void SendReady();
  // The next waiting message, its slot of the window taken; null when none may go now (none
  // waiting, the window full, or stopping).
  std::shared_ptr<JsMessage> NextToDeliver();
  // One deliverer: a coroutine that lives as long as the event loop and delivers one message
  // at a time (slot.message, kept in progress with JetStream until settled, then whatever of
  // its ordering key may go next), taking the next waiting one itself and parking when there
  // is none, until Pump hands it one. At most --max-in-flight of them, started as the window
  // first needs them: a coroutine per delivery would allocate its frames per message.
  Task<void> Deliverer(DeliverySlot& slot);
  // One batch POST; then each message is settled on its own, as its item's answer says, exactly
  // as a message delivered alone (Finish), without waiting for the others' dead letters.
  Task<void> DispatchBatch(std::vector<std::shared_ptr<JsMessage>> batch);
  // After a delivery attempt of a batch's message that is not to be acked: the retry limits,
  // the dead letter, the settle with NATS, then AfterSettled (a deliverer does the same in
  // place).
  Task<void> Finish(std::shared_ptr<JsMessage> m, Attempt a);
  // A message the service accepted, acked with the others accepted in the same turn of the
  // loop (AckQueued, posted once): nats.c wakes its flusher thread once per group of acks
  // written together, and each ack written alone would wake it (and contend for the
  // connection's lock) once per message. Its slot of the window is free at once (its POST is
  // over), so its deliverer goes on with the next waiting message in the same turn; it stays
  // in flight for the fetch loop and Drain until acked.
  void QueueAck(std::shared_ptr<JsMessage> m);
  void AckQueued();
  // Settled with NATS: the window is freed (FreeSlots, before), then whatever of its ordering
  // key may go next, then the message is buried.
  void AfterSettled(std::shared_ptr<JsMessage> m);
  // `n` messages left the sidecar's hands (`delivered`: they had a slot of the window, else
  // they were waiting or acked): starts waiting ones in the slots freed, wakes the fetch loop
  // and Drain when they wait for that.
  void FreeSlots(int n, bool delivered = true);
  // A settled message, destroyed later with others: in groups of kBuryGroup, or of kBuryBytes,
  // and whenever no delivery is left to settle. DestroyFinished takes the group apart here and
  // hands its nats.c messages to freeing_ in one post (JsMessage::Detach): freed there, off the
  // event loop, without nats.c's collector thread, which destroying them wakes again and again.
  void Bury(std::shared_ptr<JsMessage> m);
  void DestroyFinished();

  // --- consume_http.cc: the POSTs to the service (event loop) --------------------------------
  // One message's delivery, in its deliverer's own coroutine (a coroutine of its own would
  // cost a frame per message): its request (RequestFor, written in `buffer`, the deliverer's
  // previous request), the POST, the Attempt the answer makes (AttemptOf).
  std::string RequestFor(const JsMessage& m, std::string buffer);
  Attempt AttemptOf(const ServiceAnswer& r);
  // One POST of `batch` as a JSON envelope (batch_envelope.h); an Attempt per message, in
  // order. docs/worker.md ("Batch delivery") lists the rules: a transport failure or a non-2xx
  // answer applies to every message (any non-2xx naks: the envelope itself may be what was
  // refused); a 2xx answer that cannot be used naks every message; an item left out is naked.
  Task<std::vector<Attempt>> DeliverBatch(const std::vector<std::shared_ptr<JsMessage>>& batch);
  // The Attempt of each message of a batch answered 2xx, from the body that answer carried.
  std::vector<Attempt> BatchAttempts(const ServiceAnswer& answer, const std::string& batch_of,
                                     const std::vector<std::string_view>& keys);
  // The time one POST to the service took, into the delivery histogram.
  void Observe(const ServiceAnswer& r);
  // The attempt of a POST that got no usable HTTP answer, counted once per POST.
  Attempt FailedExchange(const ServiceAnswer& r);

  // --- consume_settle.cc: the end of one attempt (event loop) --------------------------------
  // One message's failed attempt settled: it counts against the retry limits and may give the
  // message up (dead letter, then term); then nak or term with NATS, and the window is freed.
  // REQUIRES: a.d is not kAck (acks go to QueueAck).
  Task<void> Settle(JsMessage& m, Attempt a);
  // `term_note` says why a terminated message was given up and where it went.
  void SettleWithNats(JsMessage& m, Disposition d, const std::string& why,
                      std::optional<Duration> retry_after, const std::string& term_note);
  // Gives `m` up: publishes it to --dead-letter (off the event loop: the publish waits for the
  // stream's answer) and returns kTerm, or kNak when that publish failed and a redelivery may
  // try again (RetryDeadLetterByRedelivery). Without --dead-letter, or at the limit, the message
  // is terminated without a copy: counted (outcome "dropped") and logged as an error.
  // `*term_note` receives what the term log line says.
  Task<Disposition> DeadLetter(JsMessage& m, const GiveUp& g, std::string* term_note);

  const ConsumeOptions& options_;
  logging::Log& log_;
  asio::io_context& io_;
  asio::thread_pool blocking_{1};
  std::string path_;
  std::unique_ptr<ServiceClient> service_;
  std::unique_ptr<NatsConnection> nats_;
  std::unique_ptr<PullSubscription> sub_;  // the fetch loop's
  std::unique_ptr<ConsumeAdmin> admin_;
  ConsumeMetrics metrics_;
  // The event loop's: per-key order, the messages being delivered, whether the in-progress and
  // ack-floor loops run.
  OrderedDelivery ordered_;
  std::vector<std::unique_ptr<DeliverySlot>> deliverers_;  // one per Deliverer started
  std::vector<DeliverySlot*> idle_;  // deliverers parked, waiting for Pump
  std::unordered_map<JsMessage*, std::shared_ptr<JsMessage>> working_;  // in batches
  std::deque<std::shared_ptr<JsMessage>> waiting_;  // fetched ahead, for a slot of the window
  int delivering_ = 0;                               // slots of the window taken
  std::vector<std::shared_ptr<JsMessage>> ready_;  // --batch-size: waiting for SendReady
  bool flush_posted_ = false;                       // SendReady is posted
  std::vector<std::shared_ptr<JsMessage>> acks_;      // waiting for AckQueued
  bool acks_posted_ = false;                          // AckQueued is posted
  std::vector<std::shared_ptr<JsMessage>> finished_;  // settled, destroyed together (Bury)
  size_t finished_bytes_ = 0;                          // their bodies' size
  bool ticking_ = false;
  asio::thread_pool polling_{1};       // consumer-info requests, off the event loop
  asio::thread_pool freeing_{1};       // settled messages' nats.c parts (DestroyFinished)
  std::atomic<int64_t> ack_wait_ms_;  // the consumer's own, once bound
  std::atomic<bool> stopping_{false};
  std::atomic<bool> nats_connected_{false};
  std::atomic<bool> bound_{false};
  bool ever_bound_ = false;  // the fetch loop's
  const RetryLimits limits_;
  FirstFailures failures_;
  Mutex mu_;
  CondVar cv_;
  // Messages fetched and not yet settled nor held: delivering_, waiting_ and acks_.
  int in_flight_ IDEM_GUARDED_BY(mu_) = 0;
  std::mt19937_64 rng_ IDEM_GUARDED_BY(mu_){std::random_device{}()};
};

}  // namespace idem::worker
