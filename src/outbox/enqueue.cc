// idem::outbox::Enqueue: idem.outbox_enqueue run with PQexecParams on the caller's connection,
// inside the caller's transaction.
#include <libpq-fe.h>

#include <nlohmann/json.hpp>

#include "idem/outbox.h"
#include "pg/pg_errors.h"
#include "pg/pg_params.h"
#include "pg/pg_result.h"

namespace idem::outbox {

Result<bool> Enqueue(PGconn* conn, const Event& event) {
  if (conn == nullptr) return InvalidArgumentError("outbox enqueue: no connection");
  const PGTransactionStatusType tx = PQtransactionStatus(conn);
  if (tx != PQTRANS_INTRANS) {
    return FailedPreconditionError(
        tx == PQTRANS_INERROR
            ? "outbox enqueue: the transaction is aborted; roll it back"
            : "outbox enqueue: must run inside the caller's transaction (BEGIN first)");
  }
  nlohmann::json headers = nlohmann::json::object();
  for (const auto& [name, value] : event.headers) headers[name] = value;
  std::string headers_text;
  try {
    headers_text = headers.dump();
  } catch (const nlohmann::json::exception&) {
    return InvalidArgumentError("outbox enqueue: a header is not valid UTF-8");
  }
  internal::pg::PgParams params;
  params.Text(event.event_id).Text(event.subject).Bytes(event.payload).Text(headers_text);
  if (event.ordering_key) {
    params.Text(*event.ordering_key);
  } else {
    params.Null();
  }
  internal::pg::PgResult result(PQexecParams(
      conn, "SELECT idem.outbox_enqueue($1, $2, $3, $4::jsonb, $5)", params.size(), nullptr,
      params.values(), params.lengths(), params.formats(), /*resultFormat=*/1));
  const std::string op = "outbox enqueue of event " + event.event_id;
  if (result == nullptr) return internal::pg::FromPgResult(nullptr, conn, op);
  IDEM_RETURN_IF_ERROR(internal::pg::CheckResult(result.get(), conn, op));
  return internal::pg::DecodeBool(result.get());
}

}  // namespace idem::outbox
