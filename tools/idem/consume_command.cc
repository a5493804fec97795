#include "consume_command.h"

#include <algorithm>

#include "daemon_flags.h"
#include "subcommand.h"
#include "worker/consume.h"

namespace idem::cli {
namespace {

constexpr const char* kConsumeDescription =
    "Deliver a NATS JetStream stream to an HTTP service, one POST per message (or JSON\n"
    "batches: --batch-size), acking only what the service accepted. JetStream redelivers\n"
    "(a lost ack, a restart, a timeout);\n"
    "every delivery of a message carries the same Idempotency-Key, so a service that claims\n"
    "the key in its own transaction (idem.inbox_claim, see docs/worker.md) or sits behind\n"
    "idem gateway applies each message once.\n\n"
    "Each POST carries the message body and headers, plus:\n"
    "  Idempotency-Key      the producer's Nats-Msg-Id, else STREAM:SEQUENCE\n"
    "  Idem-Subject         the message's subject\n"
    "  Idem-Delivery-Count  1 on the first delivery, 2 on the first redelivery, ...\n"
    "  Idem-Stream, Idem-Stream-Sequence\n"
    "The service's answer decides: 2xx ack; 5xx, 408, 425, 429, a timeout or a broken\n"
    "connection nak with exponential backoff (or Retry-After), so the message comes back;\n"
    "any other 4xx gives the message up at once.\n\n"
    "Poison messages end: a message still failing at its --max-deliver-th delivery (10), or\n"
    "after failing for --max-retry-time (30m), is given up too (with the default backoff, 10\n"
    "deliveries take about 4 minutes). A given-up message is published to --dead-letter with\n"
    "headers saying why (Idem-Dead-Reason, Idem-Status, Idem-Error-Body, Idem-Delivery-Count,\n"
    "...) and then terminated: never redelivered. Without --dead-letter it is terminated and\n"
    "logged as an error. A service that cannot be reached at all (connection refused) gives\n"
    "no message up: its messages wait, retried, until it is back.\n\n"
    "A missing stream, a bad subject, a --dead-letter subject no stream stores, or a NATS\n"
    "server that refuses the credentials exits 2 at start; NATS not reachable yet is waited\n"
    "for. SIGTERM stops fetching, finishes and settles the messages in flight, and exits 0.\n\n"
    "Example:\n"
    "  idem consume --nats nats://127.0.0.1:4222 --stream PAYMENTS --consumer ledger \\\n"
    "               --deliver http://127.0.0.1:9000/v1/apply --dead-letter payments.dead \\\n"
    "               --admin-listen 127.0.0.1:9091\n"
    "  idem consume --config /etc/idem/consume-ledger.toml";

struct ConsumeFlags {
  worker::ConsumeOptions options;
  std::string timeout = "30s";
  std::string ack_wait = "30s";
  std::string nak_delay = "1s";
  std::string max_nak_delay = "60s";
  std::string max_retry_time = "30m";
  NatsSecretFlags nats_secrets;
  DaemonOutputFlags output;
  CLI::Option* max_in_flight = nullptr;  // count() 0: not given, the default is worked out
};

// NATS, the stream and consumer, where messages go, and when a message is given up.
void AddConsumeSourceFlags(CLI::App& cmd, ConsumeFlags& flags) {
  worker::ConsumeOptions& o = flags.options;
  AddNatsFlags(cmd, o.nats_url, flags.nats_secrets);
  cmd.add_option("--stream", o.stream, "The JetStream stream to consume")->required();
  cmd.add_option("--consumer", o.consumer,
                 "Durable pull consumer name; created (explicit ack, deliver all) if missing")
      ->required();
  cmd.add_option("--deliver", o.deliver, "Where each message is POSTed: http://HOST:PORT/PATH")
      ->required();
  cmd.add_option("--dead-letter", o.dead_letter,
                 "Subject that given-up messages (refused with a 4xx, or past --max-deliver or\n"
                 "--max-retry-time) are published to before they are terminated; a stream must\n"
                 "store it (checked at start). Default: log only, the message is dropped");
  cmd.add_option("--max-deliver", o.max_deliver,
                 "Give a failing message up at this delivery (JetStream's count, 1 = the\n"
                 "first; survives restarts); 0: no delivery limit")
      ->capture_default_str();
  cmd.add_option("--max-retry-time", flags.max_retry_time,
                 "Give a failing message up once it has failed for this long, measured from\n"
                 "its first failed delivery this process saw (so a backlog is never given up\n"
                 "for its age; a restart starts the clock again); 0: no time limit")
      ->capture_default_str();
  cmd.add_option("--filter-subject", o.filter_subject,
                 "Only this subject (wildcards allowed), when the consumer is created");
  cmd.add_option("--max-ack-pending", o.max_ack_pending,
                 "Unacked messages NATS lets out to this consumer (all its instances), when\n"
                 "the consumer is created")
      ->capture_default_str();
}

// How much is out at once, the timings, the admin endpoint, and the log and config flags.
void AddConsumeDeliveryFlags(CLI::App& cmd, ConsumeFlags& flags) {
  worker::ConsumeOptions& o = flags.options;
  flags.max_in_flight =
      cmd.add_option("--max-in-flight", o.max_in_flight,
                     "Messages this process has out at once (its bounded window). Default 64,\n"
                     "or 16 x --batch-size (at most --max-ack-pending) when that is larger,\n"
                     "so several batches run at once. Up to 3 x this many more wait fetched\n"
                     "ahead; all of them count against --max-ack-pending");
  cmd.add_option("--batch-size", o.batch_size,
                 "Messages per POST, at most. 1: one POST per message as above. Above 1: every\n"
                 "POST is a JSON envelope {\"messages\":[...]} (header Idem-Batch: N) that the\n"
                 "service answers 2xx with {\"results\":[{\"idempotency_key\",\"outcome\":\n"
                 "\"ack\"|\"retry\"|\"reject\"}]}; an item left out is retried, a body that\n"
                 "cannot be read or any non-2xx retries the whole batch (docs/worker.md). A\n"
                 "batch is cut from what is ready, no waiting; it never holds two messages of\n"
                 "one ordering key; --max-in-flight still counts messages (1 to 1000)")
      ->capture_default_str();
  cmd.add_option("--timeout", flags.timeout,
                 "One delivery (one POST, a whole batch with --batch-size), connect to answer\n"
                 "(250ms, 30s, 2m); then nak and redeliver")
      ->capture_default_str();
  cmd.add_option("--ack-wait", flags.ack_wait,
                 "How long NATS waits for a settlement before redelivering, when the consumer\n"
                 "is created; at least 1s. Messages being delivered or held for their ordering\n"
                 "key are kept in progress every third of it, so a delivery may outlast it")
      ->capture_default_str();
  cmd.add_option("--nak-delay", flags.nak_delay,
                 "Redelivery delay after the first failure, doubled for each further one")
      ->capture_default_str();
  cmd.add_option("--max-nak-delay", flags.max_nak_delay, "Cap of the redelivery delay")
      ->capture_default_str();
  cmd.add_option("--admin-listen", o.admin_listen,
                 "HOST:PORT for /healthz, /readyz (503 while NATS is unreachable) and\n"
                 "/metrics (default: none)");
  AddLogAndConfigFlags(cmd, flags.output, "consume");
}

void AddConsumeFlags(CLI::App& cmd, ConsumeFlags& flags) {
  AddConsumeSourceFlags(cmd, flags);
  AddConsumeDeliveryFlags(cmd, flags);
}

Result<worker::ConsumeOptions> ConsumeOptionsFromFlags(const ConsumeFlags& flags) {
  worker::ConsumeOptions options = flags.options;
  if (Status s = ParseDurationFlags(
          {{"--timeout", &flags.timeout, &options.timeout},
           {"--nak-delay", &flags.nak_delay, &options.nak_delay},
           {"--max-nak-delay", &flags.max_nak_delay, &options.max_nak_delay},
           {"--max-retry-time", &flags.max_retry_time, &options.max_retry_time},
           {"--ack-wait", &flags.ack_wait, &options.ack_wait}},
          /*must_be_positive=*/false);
      !s.ok()) {
    return s;
  }
  auto auth = NatsAuthFromFlags(flags.nats_secrets);
  if (!auth.ok()) return auth.status();
  options.nats_auth = *auth;
  options.log_json = flags.output.log_format == "json";
  if (flags.max_in_flight->count() == 0) {
    // Enough batches out at once to keep the service and the fetches busy (measured in
    // bench/consume-bench.sh: 16 batches of 32 delivered 0.59x to 0.73x of a raw
    // pull-and-ack loop, 4 of them 0.38x to 0.43x), within what NATS lets out.
    const int64_t batches = std::min<int64_t>(16 * int64_t{options.batch_size},
                                              options.max_ack_pending);
    options.max_in_flight = static_cast<int>(std::max<int64_t>(options.max_in_flight, batches));
  }
  return options;
}

// The options, and with --check-config also what RunConsume checks before it starts (a
// normal start checks, and logs its warnings, once, in RunConsume).
Result<worker::ConsumeOptions> ConfigureConsume(const ConsumeFlags& flags) {
  auto options = ConsumeOptionsFromFlags(flags);
  if (!options.ok() || !flags.output.check_config) return options;
  if (std::string e = worker::CheckConsumeOptions(*options); !e.empty()) {
    return InvalidArgumentError(e);
  }
  return options;
}

int RunConsumeCommand(const ConsumeFlags& flags) {
  return RunDaemonCommand("consume", flags, ConfigureConsume,
                          [](const worker::ConsumeOptions& options, const ConsumeFlags&) {
                            return worker::RunConsume(options);
                          });
}

}  // namespace

std::function<int()> AddConsumeCommand(CLI::App& app) {
  return AddSubcommand<ConsumeFlags>(app, "consume", kConsumeDescription, AddConsumeFlags,
                                     RunConsumeCommand);
}

}  // namespace idem::cli
