// Runs the store contract suite on the PostgreSQL store, each test in a new database with the
// current schema on one throwaway server (tests/util/migrated_database.h).
#include "contract/store_contract.h"
#include "util/migrated_database.h"

namespace idem::testing {
namespace {

ContractTarget PostgresTarget() {
  return {"Postgres",
          [](const TempDir&) { return MigratedPostgresUrl(); },
          // Sweep drops whole expired partitions (UTC days) and counts what they held, so it
          // does not report records that expired within a partition still in use.
          /*sweep_counts=*/false};
}

INSTANTIATE_TEST_SUITE_P(Server, StoreContractTest, ::testing::Values(PostgresTarget()),
                         ContractTargetName);
INSTANTIATE_TEST_SUITE_P(Server, DurableStoreContractTest, ::testing::Values(PostgresTarget()),
                         ContractTargetName);

}  // namespace
}  // namespace idem::testing
