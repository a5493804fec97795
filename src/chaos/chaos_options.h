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
  bool json = false;
  bool progress = true;                  // a progress line on standard error
};

}  // namespace idem::chaos
