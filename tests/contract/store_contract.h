// The store contract suite: one parameterised GoogleTest suite every Store must pass unchanged.
//
// A store joins the suite by instantiating it with a ContractTarget:
//
//   INSTANTIATE_TEST_SUITE_P(Sqlite, StoreContractTest,
//                            ::testing::Values(SqliteTarget()), ContractTargetName);
//   INSTANTIATE_TEST_SUITE_P(Sqlite, DurableStoreContractTest,
//                            ::testing::Values(SqliteTarget()), ContractTargetName);
//
// Each test asks the target for a fresh store URL (an empty key space) and opens it through
// OpenStore with a ManualClock, so no test sleeps to see a lease or TTL pass.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "idem/store.h"
#include "store/store_execution.h"
#include "util/temp_dir.h"

namespace idem::testing {

struct ContractTarget {
  std::string name;
  // Returns the URL of a store with no records. Called once per test with a scratch directory
  // that lives as long as the test. Reopening the same URL must reach the same records.
  std::function<std::string(const TempDir& scratch)> fresh_url;
  // Sweep reports exactly how many records it removed.
  bool sweep_counts = true;
  // Set for the tiered store: fresh_url names its Redis and this returns its PostgreSQL
  // database (StoreOptions::durable_store), also empty.
  std::function<std::string(const TempDir& scratch)> fresh_durable_url = nullptr;
};

std::string ContractTargetName(const ::testing::TestParamInfo<ContractTarget>& info);
void PrintTo(const ContractTarget& target, std::ostream* os);

class StoreContractTest : public ::testing::TestWithParam<ContractTarget> {
 protected:
  void SetUp() override;

  // Opens another handle on the same records, sharing the test's clock.
  std::unique_ptr<Store> Reopen(std::shared_ptr<Clock> clock = nullptr);

  // What the executor and the gateway reach of the store beyond Store.
  internal::ExecutionHooks& hooks() { return internal::HooksOf(*store_); }

  TempDir scratch_;
  std::string url_;
  std::shared_ptr<ManualClock> clock_;
  StoreOptions options_;
  std::unique_ptr<Store> store_;
};

// The same contract plus the promises of a store whose records outlive the process that wrote
// them: a child process is killed with SIGKILL and the store reopened. Instantiate it only for
// durable stores.
class DurableStoreContractTest : public StoreContractTest {};

}  // namespace idem::testing
