// Creating and migrating the PostgreSQL store's schema.
#pragma once

#include <string>

#include "idem/status.h"
#include "store/postgres/pg_connection.h"

namespace idem::internal::pg {

// The schema version this build writes and understands.
inline constexpr int kSchemaVersion = 2;

// Brings the schema `schema` (created if missing) to kSchemaVersion in one transaction,
// holding an advisory lock so gateways starting together take turns. Returns the version now
// in place. kFailedPrecondition if the database holds a newer version than this build knows.
Result<int> MigrateSchema(PgConnection& conn, const std::string& schema);

}  // namespace idem::internal::pg
