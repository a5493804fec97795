#include "chaos/pg_connect.h"

#include <libpq-fe.h>
#include <poll.h>

#include <atomic>
#include <cstdio>
#include <string_view>

namespace idem::chaos {
namespace {

std::atomic<bool> restarts_expected{false};

bool Routine(std::string_view m) {
  for (std::string_view level : {"NOTICE:", "INFO:", "LOG:", "DEBUG"}) {
    if (m.substr(0, level.size()) == level) return true;
  }
  return false;
}

// What a server killed and started again says to the connections it drops or refuses.
bool SaidByARestart(std::string_view m) {
  for (std::string_view s : {"terminating connection due to", "the database system is shutting down",
                             "the database system is starting up",
                             "the database system is in recovery mode",
                             "the database system is not yet accepting connections"}) {
    if (m.find(s) != std::string_view::npos) return true;
  }
  return false;
}

void OnNotice(void*, const char* message) {
  std::string_view m(message);
  if (Routine(m)) return;
  if (restarts_expected.load(std::memory_order_relaxed) && SaidByARestart(m)) return;
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.remove_suffix(1);
  std::fprintf(stderr, "idem chaos: postgresql says: %.*s\n", static_cast<int>(m.size()),
               m.data());
}

}  // namespace

void ExpectPostgresRestarts(bool expected) { restarts_expected = expected; }

PGconn* Connect(const std::string& conninfo) {
  PGconn* conn = PQconnectStart(conninfo.c_str());
  if (conn == nullptr) return nullptr;
  PQsetNoticeProcessor(conn, &OnNotice, nullptr);
  if (PQstatus(conn) == CONNECTION_BAD) return conn;
  PostgresPollingStatusType state = PGRES_POLLING_WRITING;
  while (state != PGRES_POLLING_OK && state != PGRES_POLLING_FAILED) {
    pollfd fd{PQsocket(conn), static_cast<short>(state == PGRES_POLLING_READING ? POLLIN : POLLOUT),
              0};
    // A server that does not answer in 10 s: the connection stays not OK, and its users
    // PQreset it as they do after a failed PQconnectdb.
    if (poll(&fd, 1, 10000) <= 0) break;
    state = PQconnectPoll(conn);
  }
  return conn;
}

}  // namespace idem::chaos
