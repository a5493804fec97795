// Runs the store contract suite, unchanged, on a real six-node Redis Cluster (three primaries,
// a replica each) started once for this test binary, which ctest runs as one entry.
#include <atomic>

#include "contract/store_contract.h"
#include "util/redis_cluster.h"

namespace idem::testing {
namespace {

RedisCluster& SharedCluster() {
  static RedisCluster cluster;
  static const std::string error = cluster.Start();
  if (!error.empty()) ADD_FAILURE() << "cannot start a Redis Cluster: " << error;
  return cluster;
}

// Each test gets its own key prefix, i.e. an empty key space.
ContractTarget RedisClusterTarget() {
  return {"RedisCluster",
          [](const TempDir&) {
            static std::atomic<int> next{0};
            return SharedCluster().Url("&prefix=contract" + std::to_string(++next));
          },
          /*sweep_counts=*/false};
}

INSTANTIATE_TEST_SUITE_P(Cluster, StoreContractTest, ::testing::Values(RedisClusterTarget()),
                         ContractTargetName);
INSTANTIATE_TEST_SUITE_P(Cluster, DurableStoreContractTest,
                         ::testing::Values(RedisClusterTarget()), ContractTargetName);

}  // namespace
}  // namespace idem::testing
