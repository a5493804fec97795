#include "servers/redis_server.h"

#include <signal.h>
#include <unistd.h>

#include "servers/free_port.h"

namespace idem::servers {
namespace {

constexpr const char* kRedisServer = "/usr/bin/redis-server";

}  // namespace

RedisServer::RedisServer(Options options) : options_(options) {}

RedisServer::~RedisServer() {
  if (process_ && process_->Running()) process_->Stop(SIGTERM, std::chrono::seconds(5));
}

std::string RedisServer::Start() {
  if (access(kRedisServer, X_OK) != 0) {
    return std::string(kRedisServer) +
           " is missing: install Debian's redis-server (scripts/install-deps.sh does)";
  }
  std::string error;
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = FreeLoopbackPort();
    // A cluster node also listens on port + 10000 (the cluster bus), which must be a port.
    for (int tries = 0; options_.cluster_node && port_ > 55535 && tries < 100; ++tries) {
      port_ = FreeLoopbackPort();
    }
    if (port_ == 0 || (options_.cluster_node && port_ > 55535)) return "no free loopback port";
    error = Launch();
    if (error.empty()) return error;
    // Another process took the port between the probe and the bind: try another.
    if (error.find("Address already in use") == std::string::npos) break;
  }
  return error;
}

std::string RedisServer::Launch() {
  std::vector<std::string> argv = {kRedisServer,
                                   "--port", std::to_string(port_),
                                   "--bind", "127.0.0.1",
                                   "--dir", dir_.path().string(),
                                   "--save", "",
                                   "--daemonize", "no",
                                   "--protected-mode", "no",
                                   "--appendonly", options_.append_only ? "yes" : "no",
                                   "--appendfsync", "always"};
  if (options_.cluster_node) {
    for (const char* arg : {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                            "--cluster-node-timeout", "2000"}) {
      argv.emplace_back(arg);
    }
  }
  const std::string log = dir_.File("redis-" + std::to_string(++launches_) + ".log");
  process_ = std::make_unique<Process>(argv, log);
  if (process_->WaitForLine("Ready to accept connections", std::chrono::seconds(10))) return "";
  std::string output = process_->Output();
  process_->Stop(SIGKILL);
  return "redis-server did not start on port " + std::to_string(port_) + ":\n" + output;
}

void RedisServer::Pause() {
  if (process_) ::kill(process_->pid(), SIGSTOP);
}

void RedisServer::Resume() {
  if (process_) ::kill(process_->pid(), SIGCONT);
}

void RedisServer::Kill() {
  if (process_ && process_->Running()) process_->Stop(SIGKILL);
}

std::string RedisServer::Restart() {
  Kill();
  return Launch();
}

std::string RedisServer::Url(const std::string& suffix) const {
  return "redis://127.0.0.1:" + std::to_string(port_) + suffix;
}

}  // namespace idem::servers
