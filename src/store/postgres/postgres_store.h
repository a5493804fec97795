// PostgresStore: records in a PostgreSQL database shared by any number of gateways.
//
// Every mutation is one call of a PL/pgSQL function (idem_begin, idem_complete, idem_release,
// idem_purge) that takes a transaction-scoped advisory lock on the scope before it reads and
// writes, so same-scope operations are serialised across gateways in one round trip. Records
// live in a table partitioned by day of expiry; Sweep drops whole expired partitions. Time is
// the database server's clock when StoreOptions::clock is the system clock, so clock skew
// between gateways cannot shorten a lease. See docs/postgresql.md.
#pragma once

#include <memory>
#include <string_view>

#include "idem/store.h"

namespace idem {

// Opens the store at `url` (see store/postgres/pg_url.h for the syntax and options): parses
// the URL, connects once, creates or migrates the schema and the partitions for the next days.
// kInvalidArgument for a malformed URL, kUnavailable when the server cannot be reached,
// kFailedPrecondition when the schema is newer than this build.
Result<std::unique_ptr<Store>> OpenPostgresStore(std::string_view url,
                                                 const StoreOptions& options);

// Creates or migrates the schema at `url` and returns its version (`idem migrate`).
Result<int> MigratePostgresSchema(std::string_view url);

}  // namespace idem
