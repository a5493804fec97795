#include "relay_command.h"

#include <nats/nats.h>

#include <iostream>
#include <memory>

#include "admin/admin_server.h"
#include "daemon_flags.h"
#include "idem/gateway_options.h"
#include "log/event_log.h"
#include "outbox/relay.h"
#include "outbox/subject_match.h"
#include "stop_signals.h"
#include "subcommand.h"

namespace idem::cli {
namespace {

constexpr const char* kRelayDescription =
    "Publish the transactional outbox (idem.outbox_enqueue, written in the producer's own\n"
    "transaction) to a NATS JetStream stream, with the event id as Nats-Msg-Id so the stream\n"
    "drops a copy within its duplicate window. Rows are marked published only after the\n"
    "stream's PubAck; a crash in between republishes them, as duplicates the stream drops.\n"
    "Run as many relays as you like on one outbox: each holds its batch of rows locked (SKIP\n"
    "LOCKED) until it marks them; events sharing an ordering key go out in enqueue order, one\n"
    "relay at a time. A relay takes only the rows on its stream's subjects (or --subjects);\n"
    "rows on other subjects stay pending for the relay of their stream.\n"
    "PostgreSQL or NATS down: retried with backoff, nothing lost. SIGTERM: finishes the\n"
    "batch in flight and exits 0. Rows the stream cannot take (too large) are parked with\n"
    "the reason, counted, and kept (SELECT idem.outbox_unpark(event_id)).\n\n"
    "Examples:\n"
    "  idem relay --store postgresql://app@db:5432/app --stream ORDERS \\\n"
    "             --admin-listen 127.0.0.1:9091\n"
    "  idem relay --store postgresql://app@db:5432/app --nats nats://10.0.0.5:4222 \\\n"
    "             --create-stream ORDERS --subjects 'orders.>' --duplicate-window 30m\n"
    "  idem relay --store postgresql://app@db:5432/app --stream ORDERS --subjects 'orders.eu.>'\n"
    "  idem relay --config /etc/idem/relay.toml\n\n"
    "The database password comes from libpq's environment (PGPASSWORD, PGPASSFILE or\n"
    "~/.pgpass, PGSERVICE) or --store-password-file, never from the command line.\n\n"
    "Exit codes: 0 after SIGTERM/SIGINT, 2 for bad flags, a missing stream or a schema\n"
    "from a newer idem.";

struct RelayFlags {
  PostgresStoreFlags store;
  std::string nats = "nats://127.0.0.1:4222";
  NatsSecretFlags nats_secrets;
  std::string admin_listen, stream, create_stream, subjects;
  std::string duplicate_window = "10m", claim_lease = "30s", ack_timeout = "5s",
              poll_interval = "2s", warn_uncovered_after = "1m";
  int batch = 256, max_pending = 256, outbox_retention_days = 30;
  std::string relay_id;
  DaemonOutputFlags output;
};

// --store, NATS, the stream and its subjects: what the relay reads and where it publishes.
void AddRelaySourceAndStreamFlags(CLI::App& cmd, RelayFlags& flags) {
  AddPostgresStoreFlags(
      cmd, flags.store,
      "The outbox's database: postgresql://USER[:PASS]@HOST:PORT/DB[?options] (as the\n"
      "PostgreSQL store; the schema is created or upgraded on start)");
  AddNatsFlags(cmd, flags.nats, flags.nats_secrets);
  cmd.add_option("--stream", flags.stream,
                 "The JetStream stream the outbox's subjects belong to; it must exist (the relay\n"
                 "reads its duplicate window, subjects and size limit from it)");
  cmd.add_option("--create-stream", flags.create_stream,
                 "Like --stream, but create the stream (file storage) when it does not exist");
  cmd.add_option("--subjects", flags.subjects,
                 "The subjects whose outbox rows this relay takes, comma-separated NATS\n"
                 "patterns ('orders.>'), each within the stream's subjects (default: the\n"
                 "stream's). With --create-stream: also the subjects of the stream it creates");
  cmd.add_option("--duplicate-window", flags.duplicate_window,
                 "With --create-stream: how long the stream remembers a Nats-Msg-Id (a crashed\n"
                 "relay's republish within it is dropped; beyond it, consumers' inboxes must\n"
                 "drop it). 250ms, 30s, 10m, 1h...")
      ->capture_default_str();
}

// The admin endpoint, the batch sizes, the timings, and the log and config flags.
void AddRelayTuningFlags(CLI::App& cmd, RelayFlags& flags) {
  cmd.add_option("--admin-listen", flags.admin_listen,
                 "HOST:PORT for /healthz, /readyz (PostgreSQL and NATS reachable) and /metrics\n"
                 "(default: none; port 0: any free port, printed on start)");
  cmd.add_option("--batch", flags.batch, "Rows claimed per batch (1 to 10000)")
      ->capture_default_str();
  cmd.add_option("--max-pending", flags.max_pending,
                 "Publishes awaiting their PubAck at a time (1 to 100000)")
      ->capture_default_str();
  cmd.add_option("--claim-lease", flags.claim_lease,
                 "The longest a batch may sit idle holding its rows: a relay that hangs is cut\n"
                 "off by PostgreSQL after it and its rows go to another relay (a relay that\n"
                 "dies frees them at once). Keep it well below the duplicate window")
      ->capture_default_str();
  cmd.add_option("--ack-timeout", flags.ack_timeout, "How long to wait for one PubAck")
      ->capture_default_str();
  cmd.add_option("--poll-interval", flags.poll_interval,
                 "Longest idle wait between looks at the outbox when no enqueue notification\n"
                 "arrives (notifications wake the relay at once)")
      ->capture_default_str();
  cmd.add_option("--outbox-retention-days", flags.outbox_retention_days,
                 "Days published rows are kept, so a late re-run of a producer still finds its\n"
                 "event, 0 to 366 (day partitions dropped hourly; 0: never)")
      ->capture_default_str();
  cmd.add_option("--relay-id", flags.relay_id, "Name in claims and logs (default HOST:PID)");
  cmd.add_option("--warn-uncovered-after", flags.warn_uncovered_after,
                 "Warn (at most once a minute) when a pending row on a subject this relay does\n"
                 "not take has waited this long: no running relay may take it")
      ->capture_default_str();
  AddLogAndConfigFlags(cmd, flags.output, "relay");
}

void AddRelayFlags(CLI::App& cmd, RelayFlags& flags) {
  AddRelaySourceAndStreamFlags(cmd, flags);
  AddRelayTuningFlags(cmd, flags);
}

std::vector<std::string> SplitSubjects(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string s = text.substr(start, comma - start);
    s.erase(0, s.find_first_not_of(' '));
    s.erase(s.find_last_not_of(' ') + 1);
    if (!s.empty()) out.push_back(s);
    start = comma + 1;
  }
  return out;
}

// The stream (--stream, or --create-stream with its spec) and the subjects the relay takes.
Status SetRelayStream(const RelayFlags& flags, outbox::RelayOptions& o) {
  if (!flags.stream.empty() && !flags.create_stream.empty() &&
      flags.stream != flags.create_stream) {
    return InvalidArgumentError("--stream and --create-stream name different streams");
  }
  if (!flags.create_stream.empty()) {
    outbox::StreamSpec spec;
    spec.name = flags.create_stream;
    spec.subjects = SplitSubjects(flags.subjects);
    if (spec.subjects.empty()) {
      return InvalidArgumentError("--create-stream needs --subjects, e.g. 'orders.>'");
    }
    auto window = ParseDuration(flags.duplicate_window);
    if (!window.ok()) {
      return InvalidArgumentError("--duplicate-window: " + window.status().message());
    }
    spec.duplicate_window = std::chrono::duration_cast<std::chrono::milliseconds>(*window);
    o.stream = spec.name;
    o.create_stream = std::move(spec);
  } else if (!flags.stream.empty()) {
    o.stream = flags.stream;
  } else {
    return InvalidArgumentError(
        "name the stream: --stream NAME (existing) or --create-stream NAME --subjects ...");
  }
  o.subjects = SplitSubjects(flags.subjects);
  for (const auto& subject : o.subjects) {
    if (!outbox::IsSubjectPattern(subject)) {
      return InvalidArgumentError("--subjects: '" + subject +
                                  "' is not a NATS subject pattern (dot-separated "
                                  "non-empty tokens, no spaces, '>' only last)");
    }
  }
  if (!flags.subjects.empty() && o.subjects.empty()) {
    return InvalidArgumentError("--subjects names no subject");
  }
  return Status::Ok();
}

// The durations (each positive) and the counts, within their ranges.
Status SetRelayTuning(const RelayFlags& flags, outbox::RelayOptions& o) {
  if (Status s = ParseDurationFlags(
          {{"--claim-lease", &flags.claim_lease, &o.claim_lease},
           {"--warn-uncovered-after", &flags.warn_uncovered_after, &o.warn_uncovered_after},
           {"--ack-timeout", &flags.ack_timeout, &o.ack_timeout},
           {"--poll-interval", &flags.poll_interval, &o.poll_interval}},
          /*must_be_positive=*/true);
      !s.ok()) {
    return s;
  }
  if (flags.batch < 1 || flags.batch > 10000) {
    return InvalidArgumentError("--batch must be 1 to 10000");
  }
  if (flags.max_pending < 1 || flags.max_pending > 100000) {
    return InvalidArgumentError("--max-pending must be 1 to 100000");
  }
  if (flags.outbox_retention_days < 0 || flags.outbox_retention_days > 366) {
    return InvalidArgumentError("--outbox-retention-days must be 0 to 366");
  }
  o.batch = flags.batch;
  o.max_pending = flags.max_pending;
  o.retention_days = flags.outbox_retention_days;
  return Status::Ok();
}

Result<outbox::RelayOptions> RelayOptionsFromFlags(const RelayFlags& flags) {
  outbox::RelayOptions o;
  auto store = PostgresStoreUrl(flags.store);
  if (!store.ok()) return store.status();
  o.db_url = *store;
  o.nats_url = flags.nats;
  auto auth = NatsAuthFromFlags(flags.nats_secrets);
  if (!auth.ok()) return auth.status();
  o.nats_auth = *auth;
  o.relay_id = flags.relay_id;
  if (Status s = SetRelayStream(flags, o); !s.ok()) return s;
  if (Status s = SetRelayTuning(flags, o); !s.ok()) return s;
  return o;
}

// Runs the relay until SIGTERM or SIGINT (exit code 0) or until it fails (2).
int RunRelay(const outbox::RelayOptions& o, const RelayFlags& flags) {
  logging::Log log(flags.output.log_format == "json");  // outlives every holder of the relay
  StopSignals stop_signals;
  auto relay = std::make_shared<outbox::Relay>(o, log);

  std::unique_ptr<admin::AdminServer> admin;
  if (!flags.admin_listen.empty()) {
    admin::AdminRoutes routes;
    routes.readiness = admin::ReadyUnless([relay] { return relay->NotReadyReason(); });
    routes.metrics = [relay] { return relay->metrics().Render(); };
    auto started = admin::AdminServer::StartOnOwnThread(flags.admin_listen, std::move(routes));
    if (!started.ok()) return RefuseConfiguration("relay", started.status().ToString());
    admin = std::move(*started);
    log.Info("relay", "admin on " + admin->address());
  }
  stop_signals.Start([relay, &log](const char* signal_name) {
    log.Info("relay", std::string(signal_name) + " received; finishing the batch in flight");
    relay->RequestStop();
  });
  Status status = relay->Run();
  if (!status.ok()) log.Error("relay", status.ToString());
  stop_signals.Join(/*wake=*/!status.ok());
  // Every NATS object goes before the library does (the admin handlers hold the relay, and
  // the relay its connection); then wait for the library's own threads to wind down, so none
  // still runs while the process exits.
  admin.reset();
  relay.reset();
  nats_CloseAndWait(2000);
  return status.ok() ? 0 : 2;
}

}  // namespace

std::function<int()> AddRelayCommand(CLI::App& app) {
  return AddSubcommand<RelayFlags>(
      app, "relay", kRelayDescription, AddRelayFlags, [](const RelayFlags& flags) {
        return RunDaemonCommand("relay", flags, RelayOptionsFromFlags, RunRelay);
      });
}

}  // namespace idem::cli
