// A throwaway three-node (or N-node) NATS cluster with JetStream, for tests and `idem chaos`:
// each node a NatsServer (servers/nats_server.h) with its own temp directory and store, a free
// loopback client port, and a route port of its own that every node lists. Start returns once
// the routes are up and JetStream has elected a meta leader, so a replicated stream can be
// created at once. Kill(i) / Restart(i) take one node away and bring it back on the same ports
// and store, as a crashed machine that reboots.
//
// The JetStream questions (who leads a stream, are its replicas current) are asked with
// nats.c through the nodes that are running, on a connection of its own per call.
//
// Thread safety: one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "servers/nats_server.h"

namespace idem::servers {

class NatsCluster {
 public:
  explicit NatsCluster(int nodes = 3);
  ~NatsCluster();  // stops every node

  // Starts every node and waits (up to 30 s) for the cluster's JetStream meta leader. "" on
  // success, else what went wrong (with the nodes' output), for an ASSERT message.
  std::string Start();

  int size() const { return static_cast<int>(nodes_.size()); }
  NatsServer& node(int i) { return *nodes_[i]; }
  // Every node's client URL, comma-separated: what a client is given to reach the cluster.
  std::string Urls() const;
  // The client URLs of the nodes running now, comma-separated.
  std::string RunningUrls();

  // Creates a file stream on `subjects` replicated on `replicas` nodes with a
  // `duplicate_window` dedup window (an existing one is kept), and waits (up to 30 s) until it
  // has a leader and every replica is current. "" on success, else why not.
  std::string AddStream(const std::string& name, const std::vector<std::string>& subjects,
                        std::chrono::milliseconds duplicate_window, int replicas = 3);

  // The index of the node that leads `stream` now, as its stream info says (asked through the
  // running nodes). -1 while it has none (an election under way) or when JetStream does not
  // answer; `*error` (if given) then says why.
  int StreamLeader(const std::string& stream, std::string* error = nullptr);
  // The index of the node that leads durable consumer `consumer` of `stream` (a raft group of
  // its own, not always on the stream leader's node); -1 when none does or no answer came.
  int ConsumerLeader(const std::string& stream, const std::string& consumer);
  // Waits up to `timeout` until `stream` has a leader that is not node `not_leader` (-1: any
  // node). The index of that leader, or -1 with `*error` (if given) set to the last state seen.
  int WaitStreamLeader(const std::string& stream, std::chrono::milliseconds timeout,
                       int not_leader = -1, std::string* error = nullptr);
  // Waits up to `timeout` until `stream` has a leader and every one of its replicas is current
  // (a restarted node has caught up). "" on success, else the last state seen.
  std::string WaitStreamHealthy(const std::string& stream, std::chrono::milliseconds timeout);

  // SIGKILL node `i`, as a crash would.
  void Kill(int i);
  // Starts node `i` again on its ports and store. "" on success, else why not.
  std::string Restart(int i);

 private:
  // Starts every node on new route ports; "" or what went wrong.
  std::string StartNodes();

  std::vector<std::unique_ptr<NatsServer>> nodes_;
};

}  // namespace idem::servers
