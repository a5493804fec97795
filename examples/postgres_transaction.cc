// Recording the idempotency key in the service's own PostgreSQL transaction: the payment row
// and the idempotency record commit together or not at all, so a retry can never find one
// without the other.
//
//   postgres_transaction 'postgresql://USER@HOST:PORT/DB'
//
// Creates a table `example_payments`, handles the same request three times with one key, and
// prints what each attempt got. It exits non-zero unless exactly one payment row exists.
#include <libpq-fe.h>

#include <iostream>
#include <memory>
#include <string>

#include "idem/fingerprint.h"
#include "idem/postgres.h"
#include "idem/store.h"

namespace {

using Connection = std::unique_ptr<PGconn, decltype(&PQfinish)>;

bool Exec(PGconn* conn, const char* sql) {
  std::unique_ptr<PGresult, decltype(&PQclear)> r(PQexec(conn, sql), &PQclear);
  const auto status = PQresultStatus(r.get());
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return true;
  std::cerr << sql << ": " << PQerrorMessage(conn);
  return false;
}

// One attempt of "POST /payments" with an Idempotency-Key, as a retrying client makes it.
idem::StoredResponse Handle(PGconn* conn, const idem::Scope& scope, const std::string& body) {
  const auto fp = idem::ComputeFingerprint({}, {"POST", "/payments", "", body, {}});
  if (!fp.ok()) return {500, {}, fp.status().ToString()};
  if (!Exec(conn, "BEGIN")) return {503, {}, "database unavailable"};

  auto begun = idem::postgres::BeginInTransaction(conn, scope, *fp, std::chrono::seconds(30));
  if (!begun.ok()) {
    Exec(conn, "ROLLBACK");
    return {503, {}, begun.status().ToString()};
  }
  if (auto* replay = std::get_if<idem::Replay>(&*begun)) {
    Exec(conn, "ROLLBACK");
    return replay->response;  // the response committed by the first attempt
  }
  if (std::holds_alternative<idem::Mismatch>(*begun)) {
    Exec(conn, "ROLLBACK");
    return {422, {}, "this key was used with another request"};
  }
  if (std::holds_alternative<idem::InFlight>(*begun)) {
    Exec(conn, "ROLLBACK");
    return {409, {}, "in flight, retry later"};
  }
  const idem::FencingToken token = *idem::OwnedToken(*begun);

  // The business write, in the same transaction as the record.
  if (!Exec(conn, "INSERT INTO example_payments (amount) VALUES (250)")) {
    Exec(conn, "ROLLBACK");
    return {500, {}, "insert failed"};
  }
  const idem::StoredResponse created{201, {{"Location", "/payments/1"}}, R"({"amount":250})"};
  auto done = idem::postgres::CompleteInTransaction(conn, scope, token, created,
                                                    std::chrono::hours(24));
  if (!done.ok() || *done != idem::CompleteOutcome::kOk || !Exec(conn, "COMMIT")) {
    Exec(conn, "ROLLBACK");
    return {503, {}, "not recorded; retry"};  // nothing committed: the retry runs afresh
  }
  return created;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: postgres_transaction postgresql://USER@HOST:PORT/DB\n";
    return 2;
  }
  // Opening a store once creates or migrates idem's schema in this database.
  auto store = idem::OpenStore(argv[1]);
  if (!store.ok()) {
    std::cerr << "cannot open store: " << store.status().ToString() << "\n";
    return 1;
  }
  Connection conn(PQconnectdb(argv[1]), &PQfinish);
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    std::cerr << "cannot connect: " << PQerrorMessage(conn.get());
    return 1;
  }
  if (!Exec(conn.get(), "CREATE TABLE IF NOT EXISTS example_payments (id bigserial PRIMARY KEY, "
                        "amount bigint NOT NULL)") ||
      !Exec(conn.get(), "TRUNCATE example_payments")) {
    return 1;
  }
  const idem::Scope scope{"tenant-a", "", "pay-order-42"};
  (void)(*store)->Purge(scope);  // start afresh when the example is run again
  for (int attempt = 1; attempt <= 3; ++attempt) {
    const idem::StoredResponse r = Handle(conn.get(), scope, R"({"amount":250})");
    std::cout << "attempt " << attempt << ": " << r.status << " " << r.body << "\n";
  }
  std::unique_ptr<PGresult, decltype(&PQclear)> count(
      PQexec(conn.get(), "SELECT count(*) FROM example_payments"), &PQclear);
  const std::string rows = PQresultStatus(count.get()) == PGRES_TUPLES_OK
                               ? PQgetvalue(count.get(), 0, 0)
                               : std::string("?");
  std::cout << "payment rows: " << rows << "\n";
  return rows == "1" ? 0 : 1;
}
