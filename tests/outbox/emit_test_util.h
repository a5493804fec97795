// Helpers shared by the emit layer's tests: a libpq connection, the stream read back in order,
// and `idem relay` run as a child process with its admin endpoint.
#pragma once

#include <libpq-fe.h>
#include <nats/nats.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "util/js_client.h"  // AddStream
#include "util/postgres_server.h"
#include "util/process.h"
#include "util/temp_dir.h"
#include "util/wait_for.h"

namespace idem::testing {

struct PgConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using PgConn = std::unique_ptr<PGconn, PgConnDeleter>;

// A connection to `database`, or null (with a gtest failure) when it cannot connect.
PgConn ConnectPg(const PostgresServer& server, const std::string& database);
// Runs `sql`; returns the first column of the first row, "" for none, "ERROR: ..." on error.
std::string Exec(PGconn* conn, const std::string& sql);

// One message of a stream, read back by sequence.
struct StreamMessage {
  uint64_t seq = 0;
  std::string subject;
  std::string data;
  std::string msg_id;  // Nats-Msg-Id
  std::map<std::string, std::string> headers;  // the first value of each name
  std::vector<std::pair<std::string, std::string>> header_lines;  // every (name, value)
};
// Every message of `stream`, in stream order.
std::vector<StreamMessage> ReadStream(jsCtx* js, const std::string& stream);

// `idem relay` as a child process. Extra environment (the test crash point) is set for the
// child only.
class RelayProcess {
 public:
  // `crash_point`: IDEM_TEST_CRASH_POINT for the child (core/crash_point.h); "": none.
  RelayProcess(const std::vector<std::string>& args, const std::string& log_path,
               const std::string& crash_point = "");
  // Waits for the admin listener's line; "" on success, else the relay's output.
  std::string WaitReady(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // A metric's value from /metrics (with labels as written, e.g. `x{reason="too_large"}`);
  // -1 when the endpoint or the metric is missing.
  double Metric(const std::string& name);
  // The HTTP status of GET `path` on the admin listener (0: no answer).
  int AdminStatus(const std::string& path);
  Process& process() { return *process_; }

 private:
  std::unique_ptr<Process> process_;
  std::string admin_;
};

}  // namespace idem::testing
