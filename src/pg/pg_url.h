// Parsing of PostgreSQL URLs (the store, idem migrate, idem relay and idem sweep take them):
//   postgresql://USER[:PASS]@HOST[:PORT]/DB[?OPTIONS]     (postgres:// also accepted)
// Options, joined with '&':
//   pool_size=N               connections in the pool (1 to 1024; default 16)
//   timeout_ms=N              statement_timeout on the server, and how long a call waits for a
//                             reply or a free connection (1 to 3600000; default 5000)
//   connect_timeout=S         libpq's connect_timeout in seconds (1 to 3600; default 5)
//   schema=NAME               schema holding idem's tables (default public; created if missing)
//   partition_horizon_days=N  days of partitions created ahead (1 to 366; default 2)
//   sslmode=..., application_name=...   passed to libpq as they are
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "idem/status.h"

namespace idem::internal::pg {

struct PgConfig {
  std::string display;  // the URL without password and options, for logs
  // libpq keywords and values for PQconnectdbParams(expand_dbname=1).
  std::vector<std::string> keywords;
  std::vector<std::string> values;
  int pool_size = 16;
  std::chrono::milliseconds timeout{5000};
  int connect_timeout_s = 5;
  std::string schema = "public";
  int partition_horizon_days = 2;
};

// kInvalidArgument, naming the problem, for anything malformed or unknown.
Result<PgConfig> ParsePostgresUrl(std::string_view url);

// True for the schemes this store answers to.
bool IsPostgresUrl(std::string_view url);

}  // namespace idem::internal::pg
