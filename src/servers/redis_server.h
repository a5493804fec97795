// A throwaway redis-server for tests and `idem chaos`: its own temp directory, a free loopback port, stopped by
// PID. Kill() and Restart() let fault tests take the server away and bring it back on the same
// port, with its append-only file if it was started with one.
#pragma once

#include <memory>
#include <string>

#include "servers/process.h"
#include "servers/temp_dir.h"

namespace idem::servers {

class RedisServer {
 public:
  struct Options {
    bool append_only = false;  // appendonly yes, appendfsync always: survives Restart()
    // A Redis Cluster node (cluster-enabled, node timeout 2 s), to be joined into a cluster
    // with `redis-cli --cluster create` (tests/util/redis_cluster.h).
    bool cluster_node = false;
  };

  RedisServer() : RedisServer(Options{}) {}
  explicit RedisServer(Options options);
  ~RedisServer();

  // Starts the server; returns an empty string on success, else what went wrong (including
  // the server's own output), for an ASSERT message.
  std::string Start();
  // SIGKILL, as a crash would.
  void Kill();
  // Starts it again on the same port and directory. Same return convention as Start.
  std::string Restart();
  // SIGSTOP and SIGCONT: the server stops answering (connections stay open, commands queue up
  // in the socket), then runs what queued up.
  void Pause();
  void Resume();

  int port() const { return port_; }
  // The server's temporary directory, which holds its log files (*.log).
  const std::filesystem::path& dir() const { return dir_.path(); }
  // "redis://127.0.0.1:PORT" followed by `suffix` (e.g. "?prefix=t1").
  std::string Url(const std::string& suffix = "") const;

 private:
  std::string Launch();

  Options options_;
  TempDir dir_;
  int port_ = 0;
  int launches_ = 0;
  std::unique_ptr<Process> process_;
};

}  // namespace idem::servers
