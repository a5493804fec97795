#include "servers/postgres_server.h"

#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "servers/free_port.h"

namespace idem::servers {
namespace {

constexpr const char* kBinDir = "/usr/lib/postgresql/15/bin";

std::string Tail(const std::string& text, size_t n = 2000) {
  return text.size() <= n ? text : text.substr(text.size() - n);
}

// For "pre-existing shared memory block (key K, ID I) is still in use": the processes that
// still have segment K mapped (their /proc/PID/maps name it "/SYSV<key in hex>"), with their
// name, state and parent, so a start that fails this way says who holds the memory. Empty if
// the output names no segment.
std::string HoldersOfSharedMemory(const std::string& output) {
  const std::string marker = "shared memory block (key ";
  const size_t at = output.rfind(marker);
  if (at == std::string::npos) return "";
  const unsigned long key = std::strtoul(output.c_str() + at + marker.size(), nullptr, 10);
  char name[32];
  std::snprintf(name, sizeof name, "/SYSV%08lx", key);
  std::string holders;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = entry.path().filename().string();
    if (pid.empty() || !std::isdigit(static_cast<unsigned char>(pid[0]))) continue;
    std::ifstream maps(entry.path() / "maps");
    bool mapped = false;
    for (std::string line; !mapped && std::getline(maps, line);) {
      mapped = line.find(name) != std::string::npos;
    }
    if (!mapped) continue;
    std::ifstream status(entry.path() / "status");
    std::string process = "pid " + pid;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Name:", 0) == 0 || line.rfind("State:", 0) == 0 ||
          line.rfind("PPid:", 0) == 0) {
        process += ", " + line;
      }
    }
    holders += (holders.empty() ? "" : "; ") + process;
  }
  return " [segment " + std::string(name + 1) + " mapped by: " +
         (holders.empty() ? "no process now" : holders) + "]";
}

}  // namespace

std::string PostgresServer::Program(const std::string& name) {
  return std::string(kBinDir) + "/" + name;
}

PostgresServer::PostgresServer() {
  const std::string initdb = std::string(kBinDir) + "/initdb";
  const std::string postgres = std::string(kBinDir) + "/postgres";
  if (access(initdb.c_str(), X_OK) != 0 || access(postgres.c_str(), X_OK) != 0) {
    error_ = std::string("PostgreSQL 15 server binaries not found in ") + kBinDir +
             " (install the Debian package postgresql: scripts/install-deps.sh)";
    return;
  }
  // The server's user must reach the directory; mkdtemp made it 0700.
  chmod(dir_.path().c_str(), 0755);
  data_dir_ = dir_.File("data");
  socket_dir_ = dir_.File("sock");
  mkdir(data_dir_.c_str(), 0700);
  mkdir(socket_dir_.c_str(), 0755);
  if (geteuid() == 0) {
    const passwd* pw = getpwnam("postgres");
    if (pw == nullptr) {
      error_ = "running as root, and there is no 'postgres' user to run the server as";
      return;
    }
    run_as_ = RunAs{pw->pw_uid, pw->pw_gid};
    if (chown(data_dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0 ||
        chown(socket_dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      error_ = "cannot chown the data directory to the postgres user";
      return;
    }
  }
  Process init({initdb, "-D", data_dir_, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                "--locale=C", "--no-sync"},
               dir_.File("initdb.log"), run_as_);
  const auto status = init.WaitForExit(std::chrono::seconds(120));
  if (!status || *status != 0) {
    error_ = "initdb failed: " + Tail(init.Output());
    return;
  }
  port_ = FreeLoopbackPort();
  Start();
}

PostgresServer::~PostgresServer() {
  if (server_) server_->Stop(SIGINT, std::chrono::seconds(10));
}

bool PostgresServer::Start() {
  const std::string postgres = std::string(kBinDir) + "/postgres";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    server_ = std::make_unique<Process>(
        std::vector<std::string>{postgres, "-D", data_dir_, "-p", std::to_string(port_), "-k",
                                 socket_dir_, "-c", "listen_addresses=127.0.0.1", "-c",
                                 "fsync=off", "-c", "full_page_writes=off", "-c",
                                 "max_connections=300"},
        dir_.File("postgres.log"), run_as_, std::nullopt, /*own_process_group=*/true);
    const std::string conninfo = ConnInfo("postgres") + " connect_timeout=2";
    while (std::chrono::steady_clock::now() < deadline && server_->Running()) {
      if (PQping(conninfo.c_str()) == PQPING_OK) {
        error_.clear();
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    // Exited early: after a SIGKILL, orphaned backends may still hold the old shared memory
    // for a moment. Try again until the deadline.
    const std::string output = server_->Output();
    error_ = "postgres did not start: " + Tail(output) + HoldersOfSharedMemory(output);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

std::string PostgresServer::ConnInfo(const std::string& database) const {
  return "host=127.0.0.1 port=" + std::to_string(port_) + " user=postgres dbname=" + database;
}

std::string PostgresServer::Url(const std::string& database) const {
  return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/" + database;
}

std::string PostgresServer::CreateDatabase() {
  const std::string name = "t_" + std::to_string(++databases_);
  Query("postgres", "CREATE DATABASE " + name);
  return name;
}

std::string PostgresServer::CopyDatabase(const std::string& template_database) {
  const std::string name = "t_" + std::to_string(++databases_);
  // FILE_COPY copies the template's files in one step (a few tens of milliseconds), where the
  // default strategy writes every page through the WAL.
  const std::string answer = Query(
      "postgres", "CREATE DATABASE " + name + " TEMPLATE " + template_database +
                      " STRATEGY FILE_COPY");
  if (answer.rfind("ERROR", 0) == 0) {
    error_ = answer;
    return "";
  }
  return name;
}

std::string PostgresServer::Query(const std::string& database, const std::string& sql) const {
  PGconn* conn = PQconnectdb((ConnInfo(database) + " connect_timeout=5").c_str());
  std::string out;
  if (PQstatus(conn) != CONNECTION_OK) {
    out = std::string("ERROR: ") + PQerrorMessage(conn);
  } else {
    PGresult* r = PQexec(conn, sql.c_str());
    const auto s = PQresultStatus(r);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
      out = std::string("ERROR: ") + PQresultErrorMessage(r);
    } else if (PQntuples(r) > 0 && PQnfields(r) > 0) {
      out = PQgetvalue(r, 0, 0);
    }
    PQclear(r);
  }
  PQfinish(conn);
  return out;
}

void PostgresServer::Kill() {
  // The postmaster and every backend at once: a backend whose postmaster alone was killed can
  // still answer its connection's next query for a moment.
  if (server_) server_->KillGroup();
}

bool PostgresServer::Restart() {
  Kill();
  return Start();
}

PostgresServer& SharedPostgresServer() {
  static PostgresServer* server = new PostgresServer();  // stopped at exit, below
  static const bool registered = [] {
    std::atexit([] { delete server; });
    return true;
  }();
  (void)registered;
  return *server;
}

}  // namespace idem::servers
