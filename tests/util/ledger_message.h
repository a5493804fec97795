// The payment messages the worker-layer crash tests publish ("ACCOUNT AMOUNT TXN", e.g.
// "acct-3 -250 txn-17"), and the effects both test consumers apply for one message in the
// caller's transaction: a row in `applied` (no unique constraint: a duplicate effect would
// show as a second row for the same message key) and a ledger entry unique by txn id.
#pragma once

#include <libpq-fe.h>

#include <charconv>
#include <optional>
#include <string>
#include <string_view>

#include "idem/status.h"
#include "idem/worker.h"

namespace idem::testing {

struct LedgerMessage {
  std::string account;
  int64_t amount = 0;
  std::string txn;
};

inline std::optional<LedgerMessage> ParseLedgerMessage(std::string_view data) {
  const size_t a = data.find(' ');
  const size_t b = a == std::string_view::npos ? a : data.find(' ', a + 1);
  if (b == std::string_view::npos) return std::nullopt;
  LedgerMessage m{std::string(data.substr(0, a)), 0, std::string(data.substr(b + 1))};
  const std::string_view amount = data.substr(a + 1, b - a - 1);
  auto [p, ec] = std::from_chars(amount.data(), amount.data() + amount.size(), m.amount);
  if (ec != std::errc() || p != amount.data() + amount.size() || m.account.empty() ||
      m.txn.empty()) {
    return std::nullopt;
  }
  return m;
}

// The table `applied` the effects go to; run once per database.
inline constexpr const char* kAppliedTable =
    "CREATE TABLE IF NOT EXISTS applied (message_key text NOT NULL, txn text NOT NULL, "
    "account text NOT NULL, amount bigint NOT NULL)";

// Applies `m` under `key` in the open transaction. kInvalidArgument for a malformed message.
inline Status ApplyLedgerMessage(PGconn* conn, std::string_view key, std::string_view data) {
  auto m = ParseLedgerMessage(data);
  if (!m) return InvalidArgumentError("not 'ACCOUNT AMOUNT TXN': " + std::string(data.substr(0, 80)));
  const std::string k(key), amount = std::to_string(m->amount);
  const char* params[] = {k.c_str(), m->txn.c_str(), m->account.c_str(), amount.c_str()};
  PGresult* r = PQexecParams(conn,
                             "INSERT INTO applied (message_key, txn, account, amount) "
                             "VALUES ($1, $2, $3, $4::bigint)",
                             4, nullptr, params, nullptr, nullptr, 0);
  const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  PQclear(r);
  if (!ok) return UnavailableError(std::string("insert applied: ") + PQerrorMessage(conn));
  return worker::LedgerAppend(conn, m->account, m->txn, m->amount).status();
}

}  // namespace idem::testing
