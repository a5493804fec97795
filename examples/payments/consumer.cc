// The consumer half of the payments example: a worker that settles payments from a JetStream
// stream into PostgreSQL with exactly-once effects, using idem::worker::JetStreamConsumer.
//
//   payments_consumer NATS_URL 'postgresql://USER@HOST:PORT/DB' [STREAM] [CONSUMER] [ACK_WAIT]
//       defaults: stream PAYMENTS (created on payments.> if missing), consumer settlement,
//       ACK_WAIT 30 (seconds before NATS redelivers an unacked message; used only when the
//       durable consumer is created)
//
// The payments service (payments_service.cc) enqueues one such event per payment in its
// outbox, in the transaction that pays; `idem relay` publishes it on payments.created with
// the event id as Nats-Msg-Id, which the runtime uses as the inbox key.
//
// Each message is a payment event, JSON {"payment_id": "p-1", "account": "alice",
// "amount": 250}, published with a Nats-Msg-Id. For each one, in ONE transaction (the runtime
// opens it and commits it; the ack follows the commit):
//   1. the inbox claim (done by the runtime): a redelivery of this message is acked without
//      running the handler;
//   2. the state guard: payment P moves from "none" to "settled" (idem.transition). The same
//      payment arriving under ANOTHER message id (a producer that re-published it) finds it
//      "already" settled and changes nothing; a payment in a state the settlement must not
//      touch (say "refunded", set by another worker) is "refused" and the message terminated;
//   3. the ledger: the settlement account is credited, unique by txn id "settle:P".
// docs/worker.md walks through it. Prints "settling from STREAM/CONSUMER" once it pulls;
// SIGTERM or SIGINT stop it after the batch in hand.
#include <nats/nats.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include <array>
#include <charconv>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "idem/store.h"
#include "idem/worker.h"
#include "idem/worker_consumer.h"

namespace {

using json = nlohmann::json;

// Creates the stream (file storage, a two-minute dedup window on Nats-Msg-Id) if missing, so
// the example runs against a bare nats-server -js.
bool EnsureStream(const std::string& url, const std::string& stream) {
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  bool ok = natsConnection_ConnectTo(&nc, url.c_str()) == NATS_OK &&
            natsConnection_JetStream(&js, nc, nullptr) == NATS_OK;
  if (ok) {
    jsStreamInfo* si = nullptr;
    if (js_GetStreamInfo(&si, js, stream.c_str(), nullptr, nullptr) == NATS_OK) {
      jsStreamInfo_Destroy(si);
    } else {
      const std::string subject = "payments.>";
      const char* subjects[] = {subject.c_str()};
      jsStreamConfig cfg;
      jsStreamConfig_Init(&cfg);
      cfg.Name = stream.c_str();
      cfg.Subjects = subjects;
      cfg.SubjectsLen = 1;
      cfg.Storage = js_FileStorage;
      ok = js_AddStream(nullptr, js, &cfg, nullptr, nullptr) == NATS_OK;
    }
  }
  if (js != nullptr) jsCtx_Destroy(js);
  if (nc != nullptr) natsConnection_Destroy(nc);
  return ok;
}

// The business step for one payment event, inside the runtime's transaction.
idem::Status Settle(PGconn* conn, const idem::worker::ConsumedMessage& message) {
  const json event = json::parse(message.data, nullptr, /*allow_exceptions=*/false);
  if (!event.is_object() || !event.contains("payment_id") || !event["payment_id"].is_string() ||
      !event.contains("account") || !event["account"].is_string() ||
      !event.contains("amount") || !event["amount"].is_number_integer()) {
    return idem::InvalidArgumentError("not a payment event: " +
                                      std::string(message.data.substr(0, 120)));
  }
  const std::string payment = event["payment_id"];
  const std::string account = event["account"];
  const int64_t amount = event["amount"];

  static constexpr std::array<std::string_view, 1> kFrom = {idem::worker::kNoState};
  auto moved = idem::worker::Transition(conn, "payment", payment, "settled", kFrom);
  if (!moved.ok()) return moved.status();
  switch (*moved) {
    case idem::worker::TransitionOutcome::kAlready:
      return idem::Status::Ok();  // settled before, under another message id: converged
    case idem::worker::TransitionOutcome::kRefused: {
      auto state = idem::worker::StateOf(conn, "payment", payment);
      return idem::InvalidArgumentError("payment " + payment + " is " +
                                        (state.ok() ? *state : std::string("?")) +
                                        ", not settleable");
    }
    case idem::worker::TransitionOutcome::kApplied:
      break;
  }
  auto credited = idem::worker::LedgerAppend(conn, "settled:" + account, "settle:" + payment,
                                             amount, json{{"payment_id", payment}}.dump());
  return credited.status();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 6) {
    std::cerr << "usage: payments_consumer NATS_URL 'postgresql://USER@HOST:PORT/DB' [STREAM] "
                 "[CONSUMER] [ACK_WAIT_SECONDS]\n";
    return 2;
  }
  int ack_wait_seconds = 30;
  if (argc > 5) {
    const std::string_view text = argv[5];
    const char* last = text.data() + text.size();
    const auto [end, ec] = std::from_chars(text.data(), last, ack_wait_seconds);
    if (ec != std::errc() || end != last || ack_wait_seconds < 1) {
      std::cerr << "payments_consumer: ACK_WAIT must be a whole number of seconds >= 1, not '"
                << text << "'\n";
      return 2;
    }
  }
  sigset_t signals;  // taken by a thread of ours, blocked before nats.c starts its own
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  idem::worker::JetStreamConsumer::Options options;
  options.nats_url = argv[1];
  options.stream = argc > 3 ? argv[3] : "PAYMENTS";
  options.consumer = argc > 4 ? argv[4] : "settlement";
  options.ack_wait = std::chrono::seconds(ack_wait_seconds);
  options.log = [](std::string_view level, std::string_view line) {
    std::cout << level << " " << line << std::endl;
  };
  {
    // Opening the store installs (or upgrades) idem's schema, the worker layer's included.
    auto store = idem::OpenStore(argv[2]);
    if (!store.ok()) {
      std::cerr << "payments_consumer: " << store.status().ToString() << "\n";
      return 1;
    }
  }
  if (!EnsureStream(options.nats_url, options.stream)) {
    std::cerr << "payments_consumer: cannot find or create stream " << options.stream << " on "
              << options.nats_url << "\n";
    return 1;
  }
  auto consumer = idem::worker::JetStreamConsumer::Create(options, argv[2]);
  if (!consumer.ok()) {
    std::cerr << "payments_consumer: " << consumer.status().ToString() << "\n";
    return 2;
  }
  // Joined, not detached: the consumer must outlive the Stop() call made from this thread.
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    (*consumer)->Stop();
  });
  std::cout << "settling from " << options.stream << "/" << options.consumer << std::endl;
  idem::Status s = (*consumer)->Run(Settle);
  if (!s.ok()) {
    // Run gave up by itself: wake the stopper (the signal is blocked, so it stays pending for
    // that thread's sigwait).
    std::cerr << "payments_consumer: " << s.ToString() << "\n";
    pthread_kill(stopper.native_handle(), SIGTERM);
  }
  stopper.join();
  const auto st = (*consumer)->stats();
  std::cout << "stopped: applied " << st.applied << " duplicates " << st.duplicates
            << " termed " << st.termed << " naked " << st.naked << std::endl;
  return s.ok() ? 0 : 1;
}
