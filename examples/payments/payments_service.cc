// A payments service to put behind `idem gateway`: it closes, in its own PostgreSQL
// transaction, the windows the gateway cannot close alone (docs/worker.md walks through it).
//
//   payments_service 'postgresql://USER@HOST:PORT/DB' [HOST:PORT]     default 127.0.0.1:9100
//
//   POST /v1/payments   {"account": "alice", "amount": 250}
//       Idempotency-Key (required) and Idempotency-Fencing-Token (required: the gateway sets
//       it), X-Tenant (the caller's identity; default "default"). In ONE transaction:
//         1. fence: refuse (409 fenced) a token lower than the highest seen for this key, the
//            zombie of an attempt the gateway already handed to a newer one;
//         2. record the key with idem's transactional API (include/idem/postgres.h): a
//            duplicate that got past the gateway replays the committed response;
//         3. append to the ledger (include/idem/worker.h), unique by txn id, balance derived;
//         4. insert the payment row;
//         5. enqueue the event "payment created" in idem's transactional outbox
//            (include/idem/outbox.h), event id derived from (tenant, key); `idem relay`
//            publishes it to JetStream later, and examples/payments/consumer.cc settles it;
//         6. complete the record; COMMIT: all of it, or (any failure) none of it.
//       201 {"payment_id", "account", "amount", "balance", "fencing_token", "event_id"}.
//       X-Sleep-Ms: N sleeps N ms before the transaction (to demonstrate a hung attempt).
//   GET /v1/balances/ACCOUNT   {"account", "balance"}
//   GET /v1/stats              {"executed", "fenced", "replayed"} since start
// Prints "listening on HOST:PORT" once ready. One thread and one PostgreSQL connection per
// client connection: an example, not a server design.
#include <libpq-fe.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <charconv>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "../example_http.h"
#include "idem/fingerprint.h"
#include "idem/outbox.h"
#include "idem/postgres.h"
#include "idem/store.h"
#include "idem/worker.h"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

namespace {

std::string db_url;
std::atomic<int> executed{0}, fenced{0}, replayed{0};

using Connection = std::unique_ptr<PGconn, decltype(&PQfinish)>;
using PgResultPtr = std::unique_ptr<PGresult, decltype(&PQclear)>;

// Runs `sql` with text parameters; the result, or null after logging the error.
PgResultPtr Query(PGconn* conn, const char* sql, std::initializer_list<std::string> params = {}) {
  std::vector<const char*> values;
  for (const std::string& p : params) values.push_back(p.c_str());
  PgResultPtr r(PQexecParams(conn, sql, static_cast<int>(values.size()), nullptr, values.data(),
                             nullptr, nullptr, 0),
                &PQclear);
  const auto status = PQresultStatus(r.get());
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return r;
  std::cerr << "payments_service: " << sql << ": " << PQerrorMessage(conn);
  return PgResultPtr(nullptr, &PQclear);
}

idem::StoredResponse Json(int status, const json& body) {
  return {status, {{"Content-Type", "application/json"}}, body.dump()};
}
idem::StoredResponse Problem(int status, const std::string& type, const std::string& detail) {
  return {status, {{"Content-Type", "application/problem+json"}},
          json{{"type", type}, {"detail", detail}}.dump()};
}

// The outbox event id of the payment recorded under (tenant, key): one event per payment,
// stable across every retry and replay, so the outbox itself refuses a second one. Event ids
// are at most 255 characters; a longer (tenant, key) is hashed.
std::string EventId(const std::string& txn) {
  const std::string id = txn + ".created";
  if (id.size() <= 255) return id;
  auto digest = idem::Sha256Hex(txn);
  return "payment-sha256:" + (digest.ok() ? *digest : std::string("?")) + ".created";
}

// Everything after the request was validated, in one transaction. Any failure rolls it all
// back, so a retry finds either every effect or none.
idem::StoredResponse Pay(PGconn* conn, const std::string& tenant, const std::string& key,
                         uint64_t token, const std::string& account, int64_t amount,
                         const std::string& body) {
  auto rollback = [&](idem::StoredResponse r) {
    Query(conn, "ROLLBACK");
    return r;
  };
  if (!Query(conn, "BEGIN")) return Problem(503, "database-unavailable", "BEGIN failed");

  // 1. The fence: the highest token seen for (tenant, key), locked until COMMIT.
  if (!Query(conn, "INSERT INTO payment_fences (tenant, key, token) VALUES ($1, $2, $3) "
                   "ON CONFLICT DO NOTHING",
             {tenant, key, std::to_string(token)})) {
    return rollback(Problem(503, "database-unavailable", "fence insert failed"));
  }
  auto seen = Query(conn, "SELECT token FROM payment_fences WHERE tenant = $1 AND key = $2 "
                          "FOR UPDATE",
                    {tenant, key});
  if (!seen || PQntuples(seen.get()) != 1) {
    return rollback(Problem(503, "database-unavailable", "fence read failed"));
  }
  const uint64_t highest = std::stoull(PQgetvalue(seen.get(), 0, 0));
  if (token < highest) {
    ++fenced;
    std::cerr << "payments_service: fenced key " << key << " token " << token << " < " << highest
              << "\n";
    return rollback(Problem(409, "fenced",
                            "a newer attempt (token " + std::to_string(highest) +
                                ") took this key over; this one must not write"));
  }
  if (!Query(conn, "UPDATE payment_fences SET token = $3 WHERE tenant = $1 AND key = $2",
             {tenant, key, std::to_string(token)})) {
    return rollback(Problem(503, "database-unavailable", "fence update failed"));
  }

  // 2. The key, recorded with the business write: a duplicate replays what was committed.
  const idem::Scope scope{"payments:" + tenant, "", key};
  auto fp = idem::ComputeFingerprint({}, {"POST", "/v1/payments", "", body, {}});
  if (!fp.ok()) return rollback(Problem(500, "internal", fp.status().ToString()));
  auto begun = idem::postgres::BeginInTransaction(conn, scope, *fp, std::chrono::seconds(30));
  if (!begun.ok()) return rollback(Problem(503, "database-unavailable", begun.status().ToString()));
  if (auto* replay = std::get_if<idem::Replay>(&*begun)) {
    ++replayed;
    return rollback(replay->response);
  }
  if (std::holds_alternative<idem::Mismatch>(*begun)) {
    return rollback(Problem(422, "key-reused", "this key was used with another request"));
  }
  if (std::holds_alternative<idem::InFlight>(*begun)) {
    return rollback(Problem(409, "in-flight", "retry later"));
  }
  const idem::FencingToken record_token = *idem::OwnedToken(*begun);

  // 3. The ledger entry, unique by txn id; the balance moves with it.
  const std::string txn = "payment:" + tenant + ":" + key;
  auto appended = idem::worker::LedgerAppend(
      conn, "wallet:" + account, txn, amount,
      json{{"key", key}, {"fencing_token", token}}.dump());
  if (!appended.ok()) {
    if (appended.status().code() == idem::StatusCode::kAlreadyExists) {
      return rollback(Problem(422, "key-reused", appended.status().message()));
    }
    return rollback(Problem(503, "database-unavailable", appended.status().ToString()));
  }
  if (!*appended) {
    // In the ledger but the record has gone (past its retention): already applied.
    return rollback(Problem(409, "already-applied", "this payment was applied before"));
  }

  // 4. The payment row.
  auto row = Query(conn, "INSERT INTO payments (tenant, key, account, amount, fencing_token) "
                         "VALUES ($1, $2, $3, $4, $5) RETURNING id",
                   {tenant, key, account, std::to_string(amount), std::to_string(token)});
  auto balance = idem::worker::LedgerBalance(conn, "wallet:" + account);
  if (!row || !balance.ok()) return rollback(Problem(503, "database-unavailable", "write failed"));
  const std::string payment_id = PQgetvalue(row.get(), 0, 0);

  // 5. The event, in the same transaction: it exists exactly when the payment does. The
  // service never publishes it itself (publishing after COMMIT loses it to a crash in between;
  // publishing before COMMIT invents it when the COMMIT fails): `idem relay` publishes it
  // with the event id as Nats-Msg-Id. One account's events leave in commit order (the
  // ordering key).
  const std::string event_id = EventId(txn);
  auto queued = idem::outbox::Enqueue(
      conn, {.event_id = event_id,
             .subject = "payments.created",
             .payload = json{{"payment_id", payment_id},
                             {"account", account},
                             {"amount", amount},
                             {"tenant", tenant},
                             {"key", key}}
                            .dump(),
             .headers = {{"Content-Type", "application/json"}},
             .ordering_key = "account:" + account});
  if (!queued.ok()) {
    return rollback(Problem(503, "database-unavailable", queued.status().ToString()));
  }
  if (!*queued) {
    // The event is there but the ledger entry was new: only a hand-made event can do that.
    std::cerr << "payments_service: event " << event_id << " already in the outbox\n";
    return rollback(Problem(409, "already-applied", "this payment's event was emitted before"));
  }

  // 6. The record's response, then COMMIT.
  const idem::StoredResponse created = Json(
      201, {{"payment_id", std::stoll(payment_id)},
            {"account", account},
            {"amount", amount},
            {"balance", *balance},
            {"fencing_token", token},
            {"event_id", event_id}});
  auto done = idem::postgres::CompleteInTransaction(conn, scope, record_token, created,
                                                    std::chrono::hours(24));
  if (!done.ok() || *done != idem::CompleteOutcome::kOk) {
    return rollback(Problem(503, "database-unavailable", "record not completed"));
  }
  if (!Query(conn, "COMMIT")) return Problem(503, "database-unavailable", "COMMIT failed");
  ++executed;
  return created;
}

idem::StoredResponse HandlePayment(PGconn* conn, const http::request<http::string_body>& req) {
  const std::string key(req["Idempotency-Key"]);
  const std::string token_text(req["Idempotency-Fencing-Token"]);
  std::string tenant(req["X-Tenant"]);
  if (tenant.empty()) tenant = "default";
  if (key.empty()) return Problem(400, "missing-key", "Idempotency-Key is required");
  uint64_t token = 0;
  const auto [end, ec] =
      std::from_chars(token_text.data(), token_text.data() + token_text.size(), token);
  if (token_text.empty() || ec != std::errc() || end != token_text.data() + token_text.size() ||
      token == 0) {
    return Problem(400, "missing-fencing-token",
                   "Idempotency-Fencing-Token (set by idem gateway) is required");
  }
  const json body = json::parse(req.body(), nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("account") || !body["account"].is_string() ||
      body["account"].get<std::string>().empty() || !body.contains("amount") ||
      !body["amount"].is_number_integer()) {
    return Problem(400, "invalid-body", R"(expected {"account": "...", "amount": integer})");
  }
  if (const std::string sleep(req["X-Sleep-Ms"]); !sleep.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(sleep.c_str())));
  }
  return Pay(conn, tenant, key, token, body["account"].get<std::string>(),
             body["amount"].get<int64_t>(), req.body());
}

idem::StoredResponse Route(PGconn* conn, const http::request<http::string_body>& req) {
  const std::string target(req.target());
  if (req.method() == http::verb::post && target == "/v1/payments") return HandlePayment(conn, req);
  const std::string balances = "/v1/balances/";
  if (req.method() == http::verb::get && target.rfind(balances, 0) == 0) {
    const std::string account = target.substr(balances.size());
    if (!Query(conn, "BEGIN")) return Problem(503, "database-unavailable", "BEGIN failed");
    auto balance = idem::worker::LedgerBalance(conn, "wallet:" + account);
    Query(conn, "COMMIT");
    if (!balance.ok()) return Problem(503, "database-unavailable", balance.status().ToString());
    return Json(200, {{"account", account}, {"balance", *balance}});
  }
  if (req.method() == http::verb::get && target == "/v1/stats") {
    return Json(200, {{"executed", executed.load()},
                      {"fenced", fenced.load()},
                      {"replayed", replayed.load()}});
  }
  return Problem(404, "not-found", "no such route");
}

void Serve(tcp::socket socket) {
  Connection conn(PQconnectdb(db_url.c_str()), &PQfinish);
  beast::flat_buffer buffer;
  boost::system::error_code ec;
  for (;;) {
    http::request<http::string_body> req;
    http::read(socket, buffer, req, ec);
    if (ec) break;
    if (PQstatus(conn.get()) != CONNECTION_OK) PQreset(conn.get());
    const idem::StoredResponse r =
        PQstatus(conn.get()) == CONNECTION_OK
            ? Route(conn.get(), req)
            : Problem(503, "database-unavailable", PQerrorMessage(conn.get()));
    http::response<http::string_body> res{static_cast<http::status>(r.status), req.version()};
    for (const auto& [name, value] : r.headers) res.set(name, value);
    res.body() = r.body;
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    http::write(socket, res, ec);
    if (ec || !res.keep_alive()) break;
  }
  socket.shutdown(tcp::socket::shutdown_send, ec);
}

constexpr const char* kTables = R"sql(
CREATE TABLE IF NOT EXISTS payment_fences (
  tenant text NOT NULL, key text NOT NULL, token bigint NOT NULL, PRIMARY KEY (tenant, key));
CREATE TABLE IF NOT EXISTS payments (
  id bigserial PRIMARY KEY, tenant text NOT NULL, key text NOT NULL, account text NOT NULL,
  amount bigint NOT NULL, fencing_token bigint NOT NULL, created_at timestamptz DEFAULT now(),
  UNIQUE (tenant, key));
)sql";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: payments_service postgresql://USER@HOST:PORT/DB [HOST:PORT]\n";
    return 2;
  }
  db_url = argv[1];
  const std::string listen = argc > 2 ? argv[2] : "127.0.0.1:9100";
  // Opening a store once installs idem's schema (records, worker layer, outbox) in the database.
  auto store = idem::OpenStore(db_url);
  if (!store.ok()) {
    std::cerr << "payments_service: cannot install idem's schema: " << store.status().ToString()
              << "\n";
    return 1;
  }
  store->reset();
  Connection setup(PQconnectdb(db_url.c_str()), &PQfinish);
  PgResultPtr created(PQexec(setup.get(), kTables), &PQclear);  // several statements: PQexec
  if (PQstatus(setup.get()) != CONNECTION_OK ||
      PQresultStatus(created.get()) != PGRES_COMMAND_OK) {
    std::cerr << "payments_service: cannot create tables: " << PQerrorMessage(setup.get());
    return 1;
  }
  return idem::examples::ListenAndServe("payments_service", listen, Serve);
}
