// A throwaway PostgreSQL 15 server for tests, benchmarks and `idem chaos`: initdb in a temporary directory,
// then `postgres` on a free loopback port with fsync off, stopped when the object goes away.
// Running as root (CI), the server runs as the `postgres` user, since PostgreSQL refuses root.
//
// Missing server binaries are an error, not a skip: scripts/install-deps.sh installs them.
#pragma once

#include <memory>
#include <string>

#include "servers/process.h"
#include "servers/temp_dir.h"

namespace idem::servers {

class PostgresServer {
 public:
  // Initialises and starts the server; check error() before use.
  PostgresServer();
  ~PostgresServer();  // fast shutdown (SIGINT), then SIGKILL
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // Empty while the server runs; otherwise why it does not.
  const std::string& error() const { return error_; }
  int port() const { return port_; }
  // The server's temporary directory, which holds its log files (*.log).
  const std::filesystem::path& dir() const { return dir_.path(); }

  // postgresql://postgres@127.0.0.1:PORT/DATABASE
  std::string Url(const std::string& database) const;
  // "host=127.0.0.1 port=PORT user=postgres dbname=DATABASE", for raw libpq connections.
  std::string ConnInfo(const std::string& database) const;
  // Creates a new empty database ("t_1", "t_2", ...) and returns its name.
  std::string CreateDatabase();
  // Creates a new database ("t_N") as a copy of `template_database`, which no session may be
  // connected to, and returns its name; "" (and the server's message in error()) on failure.
  std::string CopyDatabase(const std::string& template_database);
  // Runs `sql` on `database`; returns the first column of the first row ("" if none), or
  // "ERROR: ..." on failure.
  std::string Query(const std::string& database, const std::string& sql) const;

  // The path of a program of the server's PostgreSQL installation ("pg_dump", "psql", ...).
  static std::string Program(const std::string& name);

  // SIGKILL to the postmaster: the server dies without a shutdown.
  void Kill();
  // Starts the server again on the same data directory and port. False (and error()) if it
  // does not accept connections within 30 s.
  bool Restart();

 private:
  bool Start();

  TempDir dir_;
  std::string data_dir_;
  std::string socket_dir_;
  std::optional<RunAs> run_as_;
  int port_ = 0;
  int databases_ = 0;
  std::unique_ptr<Process> server_;
  std::string error_;
};

// The server shared by every test of one test binary run, started on first use.
PostgresServer& SharedPostgresServer();

}  // namespace idem::servers
