// Runs the store contract suite on the tiered store: a real redis-server in front, a real
// PostgreSQL behind, both started for this test binary (one key prefix and one database per
// test).
#include <atomic>

#include "contract/store_contract.h"
#include "util/postgres_server.h"
#include "util/redis_server.h"

namespace idem::testing {
namespace {

RedisServer& SharedRedis() {
  static RedisServer server;
  static const std::string error = server.Start();
  if (!error.empty()) ADD_FAILURE() << "cannot start redis-server: " << error;
  return server;
}

ContractTarget TieredTarget() {
  ContractTarget target{"Tiered",
                        [](const TempDir&) {
                          static std::atomic<int> next{0};
                          return SharedRedis().Url("?prefix=tiered" + std::to_string(++next));
                        },
                        // PostgreSQL drops whole expired day partitions; Redis expires by itself.
                        /*sweep_counts=*/false};
  target.fresh_durable_url = [](const TempDir&) {
    PostgresServer& server = SharedPostgresServer();
    if (!server.error().empty()) {
      ADD_FAILURE() << server.error();
      return std::string("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1");
    }
    return server.Url(server.CreateDatabase());
  };
  return target;
}

INSTANTIATE_TEST_SUITE_P(Tiered, StoreContractTest, ::testing::Values(TieredTarget()),
                         ContractTargetName);
INSTANTIATE_TEST_SUITE_P(Tiered, DurableStoreContractTest, ::testing::Values(TieredTarget()),
                         ContractTargetName);

}  // namespace
}  // namespace idem::testing
