// `idem migrate`: creates or upgrades a store's schema ahead of the gateways that use it.
#pragma once

#include <ostream>
#include <string>

namespace idem::cli {

// Migrates the store at `store_url` and prints the schema version. PostgreSQL stores are
// migrated explicitly (so a deployment can run it once, before rolling out gateways); the
// embedded stores migrate when opened, which this does too. Returns the exit code: 0 when the
// schema is current, 1 when the store cannot be opened or migrated (a newer schema included).
int RunMigrate(const std::string& store_url, std::ostream& out, std::ostream& err);

}  // namespace idem::cli
