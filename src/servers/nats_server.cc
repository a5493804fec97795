#include "servers/nats_server.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "servers/free_port.h"
#include "servers/http_client.h"

namespace idem::servers {
namespace {

std::string FindNatsServer() {
  for (const char* path : {"/usr/sbin/nats-server", "/usr/bin/nats-server",
                           "/usr/local/bin/nats-server"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return {};
}

}  // namespace

NatsServer::NatsServer(Options options) : options_(std::move(options)) {}

NatsServer::~NatsServer() {
  if (process_ && process_->Running()) process_->Stop(SIGTERM, std::chrono::seconds(5));
}

std::string NatsServer::Start() {
  if (FindNatsServer().empty()) {
    return "nats-server is missing: install Debian's nats-server (scripts/install-deps.sh does)";
  }
  std::string error;
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = FreeLoopbackPort();
    monitor_port_ = FreeLoopbackPort();
    if (port_ == 0 || monitor_port_ == 0) return "no free loopback port";
    error = Launch();
    if (error.empty()) return error;
    // Another process took the port between the probe and the bind: try another.
    if (error.find("address already in use") == std::string::npos) break;
  }
  return error;
}

std::string NatsServer::Launch() {
  const std::string config = dir_.File("nats.conf");
  {
    std::ofstream out(config, std::ios::trunc);
    out << "listen: 127.0.0.1:" << port_ << "\n"
        << "http: 127.0.0.1:" << monitor_port_ << "\n"
        << "max_payload: " << options_.max_payload << "\n"
        << "jetstream {\n  store_dir: \"" << dir_.File("js") << "\"\n}\n";
    if (!options_.auth_token.empty()) {
      out << "authorization {\n  token: \"" << options_.auth_token << "\"\n}\n";
    }
    if (options_.cluster) {
      const Options::Cluster& c = *options_.cluster;
      out << "server_name: " << c.server_name << "\n"
          << "cluster {\n  name: " << c.name << "\n  listen: 127.0.0.1:" << c.port
          << "\n  routes: [\n";
      for (int route : c.routes) out << "    nats-route://127.0.0.1:" << route << "\n";
      out << "  ]\n}\n";
    }
  }
  const std::string log = dir_.File("nats-" + std::to_string(++launches_) + ".log");
  process_ = std::make_unique<Process>(std::vector<std::string>{FindNatsServer(), "-c", config},
                                       log);
  if (process_->WaitForLine("Server is ready", std::chrono::seconds(15))) return "";
  std::string output = process_->Output();
  process_->Stop(SIGKILL);
  return "nats-server did not start on port " + std::to_string(port_) + ":\n" + output;
}

void NatsServer::Kill() {
  if (process_ && process_->Running()) process_->Stop(SIGKILL);
}

bool NatsServer::Running() { return process_ && process_->Running(); }

std::string NatsServer::Output() const { return process_ ? process_->Output() : ""; }

std::optional<std::string> NatsServer::WaitForLine(const std::string& needle,
                                                   std::chrono::milliseconds timeout) {
  if (!process_) return std::nullopt;
  return process_->WaitForLine(needle, timeout);
}

std::string NatsServer::Restart() {
  Kill();
  return Launch();
}

int NatsServer::Connections() const {
  const HttpResponse r = Http("127.0.0.1:" + std::to_string(monitor_port_), "GET", "/connz", {}, "",
                              std::chrono::seconds(5));
  const std::string field = "\"num_connections\":";
  const size_t at = r.body.find(field);
  if (r.status != 200 || at == std::string::npos) return -1;
  return std::atoi(r.body.c_str() + r.body.find_first_not_of(' ', at + field.size()));
}

std::string NatsServer::Url() const { return "nats://127.0.0.1:" + std::to_string(port_); }

std::string NatsServer::server_name() const {
  return options_.cluster ? options_.cluster->server_name : std::string();
}

}  // namespace idem::servers
