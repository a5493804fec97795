// Where this build tree put the programs the tests start, and where the source tree is.
//
// The values live in a source file the build generates (tests/CMakeLists.txt), not in the test
// sources' compile flags: a path of the build tree in a flag would make every test object
// different in each clone, and a compiler cache could then share none of them between a clone
// and the next.
#pragma once

namespace idem::build_tree {
extern const char* const kIdemBinary;                  // the `idem` tool
extern const char* const kExampleService;              // examples/service
extern const char* const kLongRunningService;          // examples: answers after a long wait
extern const char* const kPaymentsService;             // examples/payments: the service
extern const char* const kPaymentsConsumer;            // examples/payments: the consumer
extern const char* const kPostgresTransactionExample;  // examples/postgres_transaction
extern const char* const kStoreChild;                  // tests/util/store_child.cc
extern const char* const kLedgerConsumer;              // tests/util/ledger_consumer.cc
extern const char* const kLedgerService;               // tests/util/ledger_service.cc
extern const char* const kSourceDir;                   // the source tree's root
}  // namespace idem::build_tree
