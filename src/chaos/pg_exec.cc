#include "chaos/pg_exec.h"

#include <libpq-fe.h>

#include <cstdlib>

#include "chaos/pg_connect.h"

namespace idem::chaos {

std::string WithDatabase(const std::string& url, const std::string& db) {
  const size_t scheme = url.find("://");
  const size_t authority = scheme == std::string::npos ? 0 : scheme + 3;
  const size_t query = url.find('?', authority);
  const size_t path = url.find('/', authority);
  const size_t end = query == std::string::npos ? url.size() : query;
  const size_t start = path == std::string::npos || path > end ? end : path;
  return url.substr(0, start) + "/" + db + url.substr(end);
}

std::string ExecOn(const std::string& url, const std::string& sql) {
  PGconn* conn = Connect(url);
  std::string error;
  if (PQstatus(conn) != CONNECTION_OK) {
    error = PQerrorMessage(conn);
  } else {
    PGresult* r = PQexec(conn, sql.c_str());
    if (PQresultStatus(r) != PGRES_COMMAND_OK) error = PQerrorMessage(conn);
    PQclear(r);
  }
  PQfinish(conn);
  return error;
}

int64_t QueryNumber(PGconn* conn, const char* sql, const std::vector<std::string>& params) {
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p.c_str());
  PGresult* r = PQexecParams(conn, sql, static_cast<int>(values.size()), nullptr, values.data(),
                             nullptr, nullptr, 0);
  int64_t out = -1;
  if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0)) {
    out = std::atoll(PQgetvalue(r, 0, 0));
  }
  PQclear(r);
  return out;
}

}  // namespace idem::chaos
