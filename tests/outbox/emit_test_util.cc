#include "outbox/emit_test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <thread>

#include "util/http_client.h"
#include "util/build_tree.h"

namespace idem::testing {

PgConn ConnectPg(const PostgresServer& server, const std::string& database) {
  PgConn conn(PQconnectdb(server.ConnInfo(database).c_str()));
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    ADD_FAILURE() << "connect: " << PQerrorMessage(conn.get());
    return nullptr;
  }
  return conn;
}

std::string Exec(PGconn* conn, const std::string& sql) {
  PGresult* r = PQexec(conn, sql.c_str());
  std::string out;
  const ExecStatusType s = PQresultStatus(r);
  if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
    out = std::string("ERROR: ") + PQresultErrorMessage(r);
  } else if (PQntuples(r) > 0 && PQnfields(r) > 0) {
    out = PQgetvalue(r, 0, 0);
  }
  PQclear(r);
  return out;
}

std::vector<StreamMessage> ReadStream(jsCtx* js, const std::string& stream) {
  std::vector<StreamMessage> out;
  jsStreamInfo* info = nullptr;
  if (js_GetStreamInfo(&info, js, stream.c_str(), nullptr, nullptr) != NATS_OK) {
    ADD_FAILURE() << "stream info " << stream << ": " << nats_GetLastError(nullptr);
    return out;
  }
  const uint64_t first = info->State.FirstSeq;
  const uint64_t last = info->State.LastSeq;
  jsStreamInfo_Destroy(info);
  for (uint64_t seq = first; seq <= last && seq > 0; ++seq) {
    natsMsg* msg = nullptr;
    if (js_GetMsg(&msg, js, stream.c_str(), seq, nullptr, nullptr) != NATS_OK) continue;
    StreamMessage m;
    m.seq = seq;
    m.subject = natsMsg_GetSubject(msg);
    m.data.assign(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
    const char** keys = nullptr;
    int count = 0;
    if (natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK) {
      for (int i = 0; i < count; ++i) {
        const char* value = nullptr;
        if (natsMsgHeader_Get(msg, keys[i], &value) == NATS_OK) m.headers[keys[i]] = value;
        const char** values = nullptr;
        int n = 0;
        if (natsMsgHeader_Values(msg, keys[i], &values, &n) == NATS_OK) {
          for (int v = 0; v < n; ++v) m.header_lines.emplace_back(keys[i], values[v]);
          free(values);
        }
      }
      free(keys);
    }
    m.msg_id = m.headers["Nats-Msg-Id"];
    out.push_back(std::move(m));
    natsMsg_Destroy(msg);
  }
  return out;
}

RelayProcess::RelayProcess(const std::vector<std::string>& args, const std::string& log_path,
                           const std::string& crash_point) {
  std::vector<std::string> argv = {idem::build_tree::kIdemBinary, "relay", "--admin-listen", "127.0.0.1:0"};
  argv.insert(argv.end(), args.begin(), args.end());
  // The child inherits the environment at fork; set the crash point around the start only.
  if (!crash_point.empty()) setenv("IDEM_TEST_CRASH_POINT", crash_point.c_str(), 1);
  process_ = std::make_unique<Process>(argv, log_path);
  if (!crash_point.empty()) unsetenv("IDEM_TEST_CRASH_POINT");
}

std::string RelayProcess::WaitReady(std::chrono::milliseconds timeout) {
  auto line = process_->WaitForLine("admin on ", timeout);
  if (!line) return "relay did not start: " + process_->Output();
  admin_ = AddressAfter(*line, "admin on ");
  return "";
}

double RelayProcess::Metric(const std::string& name) {
  const HttpResponse r = Http(admin_, "GET", "/metrics", {}, "", std::chrono::seconds(5));
  if (r.status != 200) return -1;
  std::istringstream in(r.body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > name.size() && line.compare(0, name.size(), name) == 0 &&
        line[name.size()] == ' ') {
      return std::atof(line.c_str() + name.size() + 1);
    }
  }
  return -1;
}

int RelayProcess::AdminStatus(const std::string& path) {
  return Http(admin_, "GET", path, {}, "", std::chrono::seconds(5)).status;
}

}  // namespace idem::testing
