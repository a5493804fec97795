// What one `idem chaos` run does: how many operations, which faults, which layers are off.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "chaos/fault_mode.h"

namespace idem::chaos {

struct ChaosOptions {
  uint64_t seed = 1;
  int ops = 1000;                        // logical operations (one payment each)
  // > 0: send operations until this many seconds have passed (`ops` is then the most that are
  // sent); the report covers the operations actually sent.
  int duration_seconds = 0;
  std::vector<FaultMode> faults;         // empty: every mode
  double fault_rate = 0.3;               // share of operations that carry a fault
  std::set<int> disabled_layers;         // 1 ingest, 2 worker, 3 emit
  std::string store = "sqlite";          // the gateway's store: sqlite, memory, redis, postgresql
  int clients = 4;                       // client threads sending operations
  // Servers the user already runs (empty: idem chaos starts its own). On them it creates a
  // database, a stream and a Redis key prefix of its own for the run, and removes the database
  // and the stream at the end; the modes that kill and restart a server need their own.
  std::string postgres_url;              // postgresql://... (needs CREATEDB)
  std::string nats_url;                  // nats://HOST:PORT, with JetStream
  std::string redis_url;                 // redis://... for --store redis
  // NATS nodes to start (without nats_url): 1, one nats-server; 3, a cluster with the stream
  // replicated on all three (--nats-cluster 3, which nats_leader_kill needs).
  int nats_cluster = 1;
  // Where to copy the logs of every process the run started, whatever the outcome. Empty: a
  // run that ends with a duplicate, a loss or no verdict keeps them in a new temporary
  // directory, and one that is exactly once does not keep them.
  std::string logs_dir;
  bool json = false;
  bool progress = true;                  // a progress line on standard error
};

}  // namespace idem::chaos
