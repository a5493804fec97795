// ConsumerTransactions: the PostgreSQL side of idem::worker::JetStreamConsumer. One connection,
// opened (and reopened after a loss) on demand, and the round trips of a message's transaction:
// BEGIN with the inbox claim in one round trip (the previous message's COMMIT travelling in
// front of it), a group's BEGIN and claims in one, and COMMIT and ROLLBACK.
//
// With the inbox, the claim runs as a statement prepared once per connection (the same SQL
// function worker.h's InboxClaim calls), so each message's claim skips parsing and planning;
// after an error it is dropped and prepared again, in case the handler deallocated it.
//
// Thread safety: none; the consume loop's thread owns it.
#pragma once

#include <libpq-fe.h>

#include <string>
#include <string_view>
#include <vector>

#include "idem/status.h"

namespace idem::worker {

class ConsumerTransactions {
 public:
  // `inbox`: claim each key in the inbox as consumer `inbox_consumer`; without it a
  // transaction is only BEGIN and COMMIT around the handler.
  ConsumerTransactions(std::string conninfo, bool inbox, std::string inbox_consumer);
  ~ConsumerTransactions();
  ConsumerTransactions(const ConsumerTransactions&) = delete;
  ConsumerTransactions& operator=(const ConsumerTransactions&) = delete;

  // The connection the handler runs its statements on; null before the first EnsureConnected.
  PGconn* conn() const { return pg_; }

  // Connects, or reconnects a lost connection. kUnavailable with libpq's reason when the
  // server cannot be reached.
  Status EnsureConnected();

  // How the previous message's transaction ends, sent in the same round trip as the next
  // message's BEGIN and claim.
  enum class Ending { kNone, kCommit, kRollback };

  // One round trip: [COMMIT or ROLLBACK of the previous message's transaction;] BEGIN; and
  // with the inbox the claim of `key`, as one simple-protocol query whose statements answer one
  // result each. `*ended` receives the ending's own outcome: OK, or why the COMMIT did not
  // commit; when it failed with an error the server skipped the rest, and the BEGIN and claim
  // are sent again on their own. Returns whether the handler should run (false: the key was
  // claimed by a committed transaction). kFailedPrecondition when the inbox claim does not
  // exist (the worker schema is not installed), else kUnavailable.
  Result<bool> BeginAndClaim(const std::string& key, Ending ending, Status* ended);

  // One round trip: BEGIN and the claims of `keys`, in that order. Each key's answer, as
  // BeginAndClaim's (all true without the inbox). On failure the transaction may be open: the
  // caller rolls it back.
  Result<std::vector<bool>> BeginAndClaimAll(const std::vector<std::string_view>& keys);

  // COMMIT on its own round trip. kUnavailable with the server's reason when it did not commit.
  Status Commit();

  // ROLLBACK when a transaction is open on a live connection.
  void Rollback();

  // Whether the connection is up (a failure while it is down is the database's, not the
  // message's).
  bool connected() const;

 private:
  // Runs a transaction-control statement; true if the server answered with `expect` as the
  // command tag (a COMMIT of an aborted transaction answers ROLLBACK).
  bool Control(const char* sql, std::string_view expect, std::string* error);

  Status PrepareClaim();

  // The error of result `r` (or of the connection) as one line.
  std::string ErrorText(PGresult* r) const;

  // Appends "; EXECUTE <the prepared claim>('<inbox consumer>', '<key>')" to `sql`.
  Status AppendClaim(std::string_view key, std::string* sql);

  // What one claim's result says: claimed or not, or why it failed (which also forgets the
  // prepared claim, in case the failure was its loss).
  Result<bool> ClaimAnswer(PGresult* claim);

  const std::string conninfo_;
  const bool inbox_;
  const std::string inbox_consumer_;
  PGconn* pg_ = nullptr;
  bool claim_prepared_ = false;  // kClaimStatement exists on pg_
};

}  // namespace idem::worker
