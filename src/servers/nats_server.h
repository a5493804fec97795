// A throwaway `nats-server -js` for tests, benchmarks and `idem chaos`: a config file and JetStream store in
// its own temp directory, a free loopback port, stopped by PID. Kill() and Restart() take the
// server away and bring it back on the same port and store directory (streams, consumers and
// unacknowledged messages survive, as on a real restart), for outage tests.
//
// A missing nats-server binary is an error, not a skip: scripts/install-deps.sh installs it.
#pragma once

#include <memory>
#include <string>

#include "servers/process.h"
#include "servers/temp_dir.h"

namespace idem::servers {

class NatsServer {
 public:
  struct Options {
    // The largest message the server accepts (nats-server's own default is 1 MiB).
    std::string max_payload = "8MB";
  };

  NatsServer() : NatsServer(Options{}) {}
  explicit NatsServer(Options options);
  ~NatsServer();  // SIGTERM, then SIGKILL

  // Starts the server; returns an empty string on success, else what went wrong (including the
  // server's own output), for an ASSERT message.
  std::string Start();
  // SIGKILL, as a crash would.
  void Kill();
  // Starts it again on the same port and store directory. Same return convention as Start.
  std::string Restart();
  bool Running();

  int port() const { return port_; }
  // The server's temporary directory, which holds its log files (*.log).
  const std::filesystem::path& dir() const { return dir_.path(); }
  // "nats://127.0.0.1:PORT"
  std::string Url() const;

 private:
  std::string Launch();

  Options options_;
  TempDir dir_;
  int port_ = 0;
  int launches_ = 0;
  std::unique_ptr<Process> process_;
};

}  // namespace idem::servers
