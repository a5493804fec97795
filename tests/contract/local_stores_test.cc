// Runs the store contract suite on the stores that need no server: memory and SQLite.
#include "contract/store_contract.h"

namespace idem::testing {
namespace {

ContractTarget MemoryTarget() {
  return {"Memory", [](const TempDir&) { return std::string("memory"); },
          /*sweep_counts=*/true};
}

ContractTarget SqliteTarget() {
  return {"Sqlite", [](const TempDir& scratch) { return "sqlite:" + scratch.File("idem.db"); },
          /*sweep_counts=*/true};
}

INSTANTIATE_TEST_SUITE_P(Local, StoreContractTest,
                         ::testing::Values(MemoryTarget(), SqliteTarget()), ContractTargetName);
INSTANTIATE_TEST_SUITE_P(Local, DurableStoreContractTest, ::testing::Values(SqliteTarget()),
                         ContractTargetName);

}  // namespace
}  // namespace idem::testing
