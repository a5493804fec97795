// Runs the store contract suite on the tiered store: a real redis-server in front, a real
// PostgreSQL behind, both started for this test binary (one key prefix and one database per
// test).
#include <atomic>

#include "contract/store_contract.h"
#include "util/migrated_database.h"
#include "util/redis_server.h"

namespace idem::testing {
namespace {

ContractTarget TieredTarget() {
  ContractTarget target{"Tiered",
                        [](const TempDir&) {
                          static std::atomic<int> next{0};
                          return SharedRedisServer().Url("?prefix=tiered" + std::to_string(++next));
                        },
                        // PostgreSQL drops whole expired day partitions; Redis expires by itself.
                        /*sweep_counts=*/false};
  target.fresh_durable_url = [](const TempDir&) { return MigratedPostgresUrl(); };
  return target;
}

INSTANTIATE_TEST_SUITE_P(Tiered, StoreContractTest, ::testing::Values(TieredTarget()),
                         ContractTargetName);
INSTANTIATE_TEST_SUITE_P(Tiered, DurableStoreContractTest, ::testing::Values(TieredTarget()),
                         ContractTargetName);

}  // namespace
}  // namespace idem::testing
