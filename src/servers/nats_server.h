// A throwaway `nats-server -js` for tests, benchmarks and `idem chaos`: a config file and JetStream
// store in its own temp directory, a free loopback port (and one for its monitoring listener),
// stopped by PID. Kill() and Restart() take the server away and bring it back on the same port and
// store directory (streams, consumers and unacknowledged messages survive, as on a real restart),
// for outage tests.
//
// One node of a cluster (servers/nats_cluster.h) is a NatsServer with Options::cluster set.
//
// A missing nats-server binary is an error, not a skip: scripts/install-deps.sh installs it.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "servers/process.h"
#include "servers/temp_dir.h"

namespace idem::servers {

class NatsServer {
 public:
  struct Options {
    // The largest message the server accepts (nats-server's own default is 1 MiB).
    std::string max_payload = "8MB";
    // Set: clients must present this token (nats-server's `authorization { token }`).
    std::string auth_token;
    // Set: the server is a node of a cluster, with a JetStream cluster across its routes.
    struct Cluster {
      std::string server_name;  // unique in the cluster; JetStream names leaders by it
      std::string name;         // the cluster's name, the same on every node
      int port = 0;             // this node's route listener on 127.0.0.1 (it keeps it on Restart)
      std::vector<int> routes;  // every node's route port (its own may be among them)
    };
    std::optional<Cluster> cluster;
  };

  NatsServer() : NatsServer(Options{}) {}
  explicit NatsServer(Options options);
  ~NatsServer();  // SIGTERM, then SIGKILL

  // Starts the server; returns an empty string on success, else what went wrong (including the
  // server's own output), for an ASSERT message.
  std::string Start();
  // SIGKILL, as a crash would.
  void Kill();
  // Starts it again on the same port and store directory (and route port, for a cluster node).
  // Same return convention as Start.
  std::string Restart();
  bool Running();
  // What the running (or last) server wrote so far; "" before Start.
  std::string Output() const;
  // Waits until the running server's output holds `needle`; the whole line, or nullopt on
  // timeout or when it is not running.
  std::optional<std::string> WaitForLine(const std::string& needle,
                                         std::chrono::milliseconds timeout);

  int port() const { return port_; }
  // How many client connections the running server has open, from its monitoring listener
  // (/connz on a loopback port of its own); -1 if it does not answer. A connection the server
  // has closed, or whose client died, is gone from the count once the server has handled every
  // message it read on it.
  int Connections() const;
  // The server's temporary directory, which holds its log files (*.log).
  const std::filesystem::path& dir() const { return dir_.path(); }
  // "nats://127.0.0.1:PORT"
  std::string Url() const;
  // Options::cluster's server_name ("" for a standalone server).
  std::string server_name() const;

 private:
  std::string Launch();

  Options options_;
  TempDir dir_;
  int port_ = 0;
  int monitor_port_ = 0;
  int launches_ = 0;
  std::unique_ptr<Process> process_;
};

}  // namespace idem::servers
