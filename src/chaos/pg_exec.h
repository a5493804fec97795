// One-statement libpq helpers of `idem chaos`'s process orchestration: creating and dropping
// the run's databases and reading a count while it waits on the pipeline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

typedef struct pg_conn PGconn;  // libpq-fe.h

namespace idem::chaos {

// `url` (postgresql://...) naming the database `db` instead of its own.
std::string WithDatabase(const std::string& url, const std::string& db);

// Runs one statement on a new connection to `url`; "" on success, else why not.
std::string ExecOn(const std::string& url, const std::string& sql);

// The first column of the first row of `sql` with text parameters, as a number; -1 if there
// is no row, the value is NULL or the query failed.
int64_t QueryNumber(PGconn* conn, const char* sql, const std::vector<std::string>& params);

}  // namespace idem::chaos
