// An HTTP service behind `idem consume` for the worker-layer tests: it applies ledger messages
// (util/ledger_message.h) with the Idempotency-Key claimed in the same transaction, the way a
// service in any language would call idem.inbox_claim:
//
//   BEGIN; claimed = inbox_claim('ledger-service', key);  false -> ROLLBACK, 200 (duplicate)
//   INSERT INTO applied ...; ledger_append(...); COMMIT; 200
//
// Answers 400 to a malformed message, 503 when PostgreSQL fails. A message whose account
// starts with "slow" hangs 5 s after its COMMIT on its first delivery (the consumer's timeout
// then fires although the effect is in). IDEM_TEST_CRASH_POINT=service.before_commit or
// service.after_commit kills it there. One thread and one connection per client connection.
//
//   idem_ledger_service PG_CONNINFO [PORT]     prints "listening on 127.0.0.1:PORT" (PORT
//                                              given again after a restart: the same address)
#include <libpq-fe.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <iostream>
#include <string>
#include <thread>

#include "idem/worker.h"
#include "util/ledger_message.h"
#include "core/crash_point.h"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

std::string g_conninfo;

bool Exec(PGconn* conn, const char* sql, const char* expect) {
  PGresult* r = PQexec(conn, sql);
  const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK && std::string(PQcmdStatus(r)) == expect;
  PQclear(r);
  return ok;
}

std::pair<int, std::string> Apply(PGconn* conn, const std::string& key, const std::string& body,
                                  bool first_delivery) {
  if (key.empty()) return {400, "Idempotency-Key required"};
  if (PQstatus(conn) != CONNECTION_OK) PQreset(conn);
  if (!Exec(conn, "BEGIN", "BEGIN")) return {503, std::string("begin: ") + PQerrorMessage(conn)};
  auto rollback = [&] {
    if (PQstatus(conn) == CONNECTION_OK) PQclear(PQexec(conn, "ROLLBACK"));
  };
  auto claimed = idem::worker::InboxClaim(conn, "ledger-service", key);
  if (!claimed.ok()) {
    rollback();
    return {503, claimed.status().ToString()};
  }
  if (!*claimed) {
    rollback();
    return {200, "duplicate"};
  }
  idem::Status s = idem::testing::ApplyLedgerMessage(conn, key, body);
  if (!s.ok()) {
    rollback();
    return {s.code() == idem::StatusCode::kInvalidArgument ? 400 : 503, s.ToString()};
  }
  idem::internal::CrashPoint("service.before_commit");
  if (!Exec(conn, "COMMIT", "COMMIT")) {
    rollback();
    return {503, std::string("commit: ") + PQerrorMessage(conn)};
  }
  idem::internal::CrashPoint("service.after_commit");
  if (first_delivery && body.rfind("slow", 0) == 0) {
    // A hung service, past the sidecar's timeout: the hang is the behaviour under test.
    std::this_thread::sleep_for(std::chrono::seconds(5));
  }
  return {200, "applied"};
}

void Serve(tcp::socket socket) {
  PGconn* conn = PQconnectdb(g_conninfo.c_str());
  beast::flat_buffer buffer;
  boost::system::error_code ec;
  for (;;) {
    http::request<http::string_body> req;
    http::read(socket, buffer, req, ec);
    if (ec) break;
    auto [status, text] = Apply(conn, std::string(req["Idempotency-Key"]), req.body(),
                                req["Idem-Delivery-Count"] == "1");
    http::response<http::string_body> res{static_cast<http::status>(status), req.version()};
    res.keep_alive(req.keep_alive());
    res.body() = text + "\n";
    res.prepare_payload();
    http::write(socket, res, ec);
    if (ec || !res.keep_alive()) break;
  }
  PQfinish(conn);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: idem_ledger_service PG_CONNINFO\n";
    return 2;
  }
  g_conninfo = argv[1];
  asio::io_context io;
  const int port = argc > 2 ? std::atoi(argv[2]) : 0;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"),
                                           static_cast<unsigned short>(port)),
                         /*reuse_addr=*/true);
  std::cout << "listening on 127.0.0.1:" << acceptor.local_endpoint().port() << std::endl;
  for (;;) {
    tcp::socket socket(io);
    boost::system::error_code ec;
    acceptor.accept(socket, ec);
    if (ec) continue;
    std::thread(Serve, std::move(socket)).detach();
  }
}
