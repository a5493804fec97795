#include "servers/nats_cluster.h"

#include <nats/nats.h>

#include <set>
#include <thread>

#include "servers/free_port.h"
#include "nats/nats_servers.h"

namespace idem::servers {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kPollWaitMs = 500;

std::string NatsText(natsStatus s, jsErrCode code = static_cast<jsErrCode>(0)) {
  std::string text = natsStatus_GetText(s);
  const char* last = nats_GetLastError(nullptr);
  if (last != nullptr && *last != '\0' && text != last) text += std::string(" (") + last + ")";
  if (code != 0) text += " [JetStream error " + std::to_string(static_cast<int>(code)) + "]";
  return text;
}

// A short-lived connection to some running node, for one JetStream question.
class Asker {
 public:
  // `wait_ms`: how long one JetStream request may take. Short for the questions that are
  // polled (no stream leader answers during an election), longer for creating a stream.
  Asker(const std::string& urls, int64_t wait_ms) {
    if (urls.empty()) {
      error_ = "no node is running";
      return;
    }
    natsOptions* opts = nullptr;
    natsStatus s = natsOptions_Create(&opts);
    if (s == NATS_OK) s = internal::SetNatsServers(opts, urls);
    if (s == NATS_OK) s = natsOptions_SetTimeout(opts, 1000);
    if (s == NATS_OK) s = natsOptions_SetAllowReconnect(opts, false);
    if (s == NATS_OK) s = natsConnection_Connect(&conn_, opts);
    natsOptions_Destroy(opts);
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = wait_ms;
    if (s == NATS_OK) s = natsConnection_JetStream(&js_, conn_, &jo);
    if (s != NATS_OK) error_ = "connect to " + urls + ": " + NatsText(s);
  }
  ~Asker() {
    if (js_ != nullptr) jsCtx_Destroy(js_);
    if (conn_ != nullptr) natsConnection_Destroy(conn_);
  }
  Asker(const Asker&) = delete;
  Asker& operator=(const Asker&) = delete;

  jsCtx* js() { return js_; }
  const std::string& error() const { return error_; }

 private:
  natsConnection* conn_ = nullptr;
  jsCtx* js_ = nullptr;
  std::string error_;
};

// What stream info says about a replicated stream.
struct StreamState {
  std::string leader;  // server name; empty: none now
  bool all_current = false;
  std::string text;  // for an error message
};

std::string ReadStreamState(Asker& asker, const std::string& stream, StreamState* out) {
  if (!asker.error().empty()) return asker.error();
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = js_GetStreamInfo(&info, asker.js(), stream.c_str(), nullptr, &code);
  if (s != NATS_OK) return "stream " + stream + " info: " + NatsText(s, code);
  out->text = "stream " + stream;
  out->all_current = true;
  if (info->Cluster != nullptr) {
    if (info->Cluster->Leader != nullptr) out->leader = info->Cluster->Leader;
    out->text += " leader '" + out->leader + "'";
    for (int i = 0; i < info->Cluster->ReplicasLen; ++i) {
      const jsPeerInfo* peer = info->Cluster->Replicas[i];
      const bool current = peer->Current && !peer->Offline;
      out->all_current = out->all_current && current;
      out->text += std::string(", replica '") + (peer->Name != nullptr ? peer->Name : "") + "' " +
                   (peer->Offline ? "offline" : current ? "current" : "behind");
    }
  }
  jsStreamInfo_Destroy(info);
  return "";
}

}  // namespace

NatsCluster::NatsCluster(int nodes) {
  for (int i = 0; i < nodes; ++i) nodes_.push_back(nullptr);
}

NatsCluster::~NatsCluster() = default;

std::string NatsCluster::StartNodes() {
  // The route ports first: every node's configuration lists all of them.
  std::vector<int> routes;
  std::set<int> seen;
  while (routes.size() < nodes_.size()) {
    const int port = FreeLoopbackPort();
    if (port == 0) return "no free loopback port";
    if (seen.insert(port).second) routes.push_back(port);
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    NatsServer::Options options;
    options.cluster = NatsServer::Options::Cluster{"n" + std::to_string(i + 1), "idem",
                                                   routes[i], routes};
    nodes_[i] = std::make_unique<NatsServer>(options);
    if (auto e = nodes_[i]->Start(); !e.empty()) {
      return "cluster node " + std::to_string(i + 1) + ": " + e;
    }
  }
  return "";
}

std::string NatsCluster::Start() {
  std::string error;
  for (int attempt = 0; attempt < 3; ++attempt) {
    error = StartNodes();
    // Another process may have taken a route port between the probe and the bind: then the
    // nodes go and start again on other ports.
    if (error.empty() || error.find("address already in use") == std::string::npos) break;
    for (auto& node : nodes_) node.reset();
  }
  if (!error.empty()) return error;
  // Each node logs the meta leader once it knows one ("Self is new ..." on the leader): its
  // routes are up and JetStream can place replicated streams. Rarely (a few runs in a hundred
  // on a loaded machine) the first two nodes elect a leader before the third's routes are up,
  // and nats-server 2.9 leaves the third without one; started again on its store, it joins.
  auto knows_leader = [this](size_t i, std::chrono::seconds within) {
    return nodes_[i]->WaitForLine("metadata leader", within).has_value();
  };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    bool known = knows_leader(i, 10s);
    for (int restart = 0; !known && restart < 2; ++restart) {
      if (auto e = nodes_[i]->Restart(); !e.empty()) {
        return "cluster node " + std::to_string(i + 1) + " restart: " + e;
      }
      known = knows_leader(i, 15s);
    }
    if (!known) {
      std::string logs;
      for (size_t j = 0; j < nodes_.size(); ++j) {
        logs += "\n--- node " + std::to_string(j + 1) + ":\n" + nodes_[j]->Output();
      }
      return "cluster node " + std::to_string(i + 1) +
             " knows no JetStream meta leader, after two restarts too:" + logs;
    }
  }
  return "";
}

std::string NatsCluster::Urls() const {
  std::string urls;
  for (const auto& node : nodes_) {
    if (node) urls += (urls.empty() ? "" : ",") + node->Url();
  }
  return urls;
}

std::string NatsCluster::RunningUrls() {
  std::string urls;
  for (const auto& node : nodes_) {
    if (node && node->Running()) urls += (urls.empty() ? "" : ",") + node->Url();
  }
  return urls;
}

std::string NatsCluster::AddStream(const std::string& name,
                                   const std::vector<std::string>& subjects,
                                   std::chrono::milliseconds duplicate_window, int replicas) {
  std::vector<const char*> subject_ptrs;
  for (const auto& s : subjects) subject_ptrs.push_back(s.c_str());
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  config.Name = name.c_str();
  config.Subjects = subject_ptrs.data();
  config.SubjectsLen = static_cast<int>(subject_ptrs.size());
  config.Storage = js_FileStorage;
  config.Replicas = replicas;
  config.Duplicates = std::chrono::nanoseconds(duplicate_window).count();
  // Right after Start the meta leader may not know every peer yet ("no suitable peers"):
  // retried for a while.
  std::string error;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    Asker asker(RunningUrls(), 5000);
    error = asker.error();
    if (error.empty()) {
      jsStreamInfo* info = nullptr;
      jsErrCode code = static_cast<jsErrCode>(0);
      const natsStatus s = js_AddStream(&info, asker.js(), &config, nullptr, &code);
      if (info != nullptr) jsStreamInfo_Destroy(info);
      if (s == NATS_OK || code == JSStreamNameExistErr) break;
      error = "create stream " + name + ": " + NatsText(s, code);
    }
    if (std::chrono::steady_clock::now() > deadline) return error;
    std::this_thread::sleep_for(100ms);
  }
  return WaitStreamHealthy(name, 30s);
}

int NatsCluster::StreamLeader(const std::string& stream, std::string* error) {
  Asker asker(RunningUrls(), kPollWaitMs);
  StreamState state;
  std::string e = ReadStreamState(asker, stream, &state);
  if (e.empty()) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!state.leader.empty() && nodes_[i]->server_name() == state.leader) {
        return static_cast<int>(i);
      }
    }
    e = state.text + ": no leader now";
  }
  if (error != nullptr) *error = e;
  return -1;
}

int NatsCluster::ConsumerLeader(const std::string& stream, const std::string& consumer) {
  Asker asker(RunningUrls(), kPollWaitMs);
  if (!asker.error().empty()) return -1;
  jsConsumerInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  if (js_GetConsumerInfo(&info, asker.js(), stream.c_str(), consumer.c_str(), nullptr, &code) !=
      NATS_OK) {
    return -1;
  }
  std::string leader;
  if (info->Cluster != nullptr && info->Cluster->Leader != nullptr) leader = info->Cluster->Leader;
  jsConsumerInfo_Destroy(info);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!leader.empty() && nodes_[i]->server_name() == leader) return static_cast<int>(i);
  }
  return -1;
}

int NatsCluster::WaitStreamLeader(const std::string& stream, std::chrono::milliseconds timeout,
                                  int not_leader, std::string* error) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last;
  for (;;) {
    const int leader = StreamLeader(stream, &last);
    if (leader >= 0 && leader != not_leader) return leader;
    if (leader >= 0) last = "stream " + stream + " still led by node " + std::to_string(leader + 1);
    if (std::chrono::steady_clock::now() > deadline) {
      if (error != nullptr) *error = "after " + std::to_string(timeout.count()) + " ms: " + last;
      return -1;
    }
    std::this_thread::sleep_for(50ms);
  }
}

std::string NatsCluster::WaitStreamHealthy(const std::string& stream,
                                           std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last;
  for (;;) {
    Asker asker(RunningUrls(), kPollWaitMs);
    StreamState state;
    last = ReadStreamState(asker, stream, &state);
    if (last.empty()) {
      if (!state.leader.empty() && state.all_current) return "";
      last = state.text;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return "after " + std::to_string(timeout.count()) + " ms: " + last;
    }
    std::this_thread::sleep_for(50ms);
  }
}

void NatsCluster::Kill(int i) { nodes_[i]->Kill(); }

std::string NatsCluster::Restart(int i) { return nodes_[i]->Restart(); }

}  // namespace idem::servers
