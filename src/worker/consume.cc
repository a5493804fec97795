// `idem consume`'s options, start-up and shutdown. The process itself (fetch loop, event loop,
// delivery, settling) is the Sidecar class: consume_sidecar.h says which file has which part.
#include "worker/consume.h"

#include <boost/asio/signal_set.hpp>

#include <thread>

#include "worker/consume_sidecar.h"

namespace idem::worker {
namespace {

// --batch-size, at most.
constexpr int kMaxBatchSize = 1000;

// Checks the options; an empty string when they can work, else what is wrong. Logs the
// warnings about combinations that work but surprise.
std::string CheckOptions(const ConsumeOptions& options, logging::Log& log) {
  if (options.stream.empty() || options.consumer.empty() || options.deliver.empty()) {
    return "--stream, --consumer and --deliver are required";
  }
  if (options.deliver.rfind("http://", 0) != 0) {
    return "--deliver '" + options.deliver + "' must be http://HOST:PORT/PATH";
  }
  if (options.max_in_flight < 1) return "--max-in-flight must be at least 1";
  if (options.max_ack_pending < 1) return "--max-ack-pending must be at least 1";
  if (options.batch_size < 1 || options.batch_size > kMaxBatchSize) {
    return "--batch-size must be 1 to " + std::to_string(kMaxBatchSize);
  }
  if (options.timeout.count() < 1) return "--timeout must be positive";
  if (!options.dead_letter.empty() && !ValidSubject(options.dead_letter, /*wildcards=*/false)) {
    return "--dead-letter '" + options.dead_letter +
           "' must be a NATS subject without wildcards (tokens separated by '.')";
  }
  if (!options.filter_subject.empty() && !ValidSubject(options.filter_subject, true)) {
    return "--filter-subject '" + options.filter_subject +
           "' must be a NATS subject (tokens separated by '.', '*' for one token, a final "
           "'>' for the rest)";
  }
  if (std::string e = ValidRetryLimits({options.max_deliver, options.max_retry_time}); !e.empty()) {
    return "--max-deliver " + std::to_string(options.max_deliver) + ", --max-retry-time " +
           Ms(options.max_retry_time) + ": " + e;
  }
  // A delivery may outlast ack_wait: it is kept in progress (every third of ack_wait) until the
  // service answers or --timeout passes. Below a second, those acks would be too many and a
  // short pause of the process would let NATS redeliver.
  if (options.ack_wait < Duration(1000)) {
    return "--ack-wait (" + Ms(options.ack_wait) + ") must be at least 1 s";
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
  return "";
}

// The start-up log line: what is consumed, from where, to where, with which limits.
std::string StartLine(const ConsumeOptions& options, const std::string& admin_text) {
  return "consume " + options.stream + "/" + options.consumer + " from " + options.nats_url +
         " to " + options.deliver + ", " + admin_text + ", max in flight " +
         std::to_string(options.max_in_flight) +
         (options.batch_size > 1 ? ", batches of up to " + std::to_string(options.batch_size)
                                 : std::string()) +
         ", timeout " + Ms(options.timeout) + ", ack wait " + Ms(options.ack_wait) +
         ", max deliver " + std::to_string(options.max_deliver) + ", max retry time " +
         Ms(options.max_retry_time) + ", dead letters " +
         (options.dead_letter.empty() ? "logged only" : "to " + options.dead_letter);
}

// After the fetch loop has returned: the deliveries in flight finish and settle (within the
// grace period), held messages go back, acks are flushed. The event loop still runs.
void FinishDeliveries(Sidecar& sidecar, logging::Log& log) {
  const int left = sidecar.Drain();
  sidecar.GiveBackHeld();
  Status flushed = sidecar.FlushNats();
  if (left > 0) {
    log.Warn("shutdown", std::to_string(left) + " delivery(ies) still running after the grace "
                             "period; NATS redelivers them after ack_wait");
  }
  if (!flushed.ok()) log.Warn("shutdown", "acks may not have reached NATS: " + flushed.ToString());
}

void LogStopped(const ConsumeMetrics& m, logging::Log& log) {
  log.Info("stopped", std::to_string(m.count(ConsumeMetrics::kDelivered)) + " delivered, " +
                          std::to_string(m.count(ConsumeMetrics::kAcked)) + " acked, " +
                          std::to_string(m.count(ConsumeMetrics::kNaked)) + " naked, " +
                          std::to_string(m.count(ConsumeMetrics::kTermed)) + " terminated");
}

}  // namespace

std::string CheckConsumeOptions(const ConsumeOptions& in) {
  logging::Log log(in.log_json);
  std::string error = CheckOptions(in, log);
  log.Flush();
  return error;
}

int RunConsume(const ConsumeOptions& in) {
  logging::Log log(in.log_json);
  ConsumeOptions options = in;
  auto fail = [&](const std::string& message) {
    log.Error("config", message);
    log.Flush();
    return 2;
  };
  if (std::string e = CheckOptions(options, log); !e.empty()) return fail(e);

  // One event-loop thread runs every delivery and the admin listener: an exchange is a few
  // microseconds of work between waits, and the service client's connections need no strand.
  // Sockets and timers are used by that thread alone (set up before it starts, torn down after
  // it ends), so the reactor takes no lock per socket operation (UNSAFE_IO); other threads
  // only post to the loop, which stays locked.
  asio::io_context io(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO);
  auto work = asio::make_work_guard(io);
  Sidecar sidecar(options, log, io);
  if (Status s = sidecar.Init(); !s.ok()) return fail(s.ToString());
  std::string admin_text = "no admin listener";
  if (!options.admin_listen.empty()) {
    std::string address;
    if (Status s = sidecar.ListenAdmin(&address); !s.ok()) return fail(s.ToString());
    admin_text = "admin on " + address;
  }
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (!ec) sidecar.BeginShutdown(signal == SIGTERM ? "SIGTERM received" : "SIGINT received");
  });
  std::thread loop([&] { io.run(); });
  log.Info("listening", StartLine(options, admin_text));

  const Status fatal = sidecar.FetchLoop();
  if (!fatal.ok()) log.Error("config", fatal.ToString());
  FinishDeliveries(sidecar, log);
  work.reset();
  io.stop();
  loop.join();
  sidecar.CloseNats();
  LogStopped(sidecar.metrics(), log);
  log.Flush();
  return fatal.ok() ? 0 : 2;
}

}  // namespace idem::worker
