// Runs the store contract suite, unchanged, on a real redis-server started for this test binary.
#include <atomic>

#include "contract/store_contract.h"
#include "util/redis_server.h"

namespace idem::testing {
namespace {

// One server for the whole binary; each test gets its own key prefix, i.e. an empty key space.
ContractTarget RedisTarget() {
  return {"Redis",
          [](const TempDir&) {
            static std::atomic<int> next{0};
            return SharedRedisServer().Url("?prefix=contract" + std::to_string(++next));
          },
          /*sweep_counts=*/false};
}

INSTANTIATE_TEST_SUITE_P(Redis, StoreContractTest, ::testing::Values(RedisTarget()),
                         ContractTargetName);
INSTANTIATE_TEST_SUITE_P(Redis, DurableStoreContractTest, ::testing::Values(RedisTarget()),
                         ContractTargetName);

}  // namespace
}  // namespace idem::testing
