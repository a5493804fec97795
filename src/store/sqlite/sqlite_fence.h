// FenceAllocator: the SQLite store's fencing tokens.
//
// Tokens strictly increase across every acquisition, in commit order, across releases, purges,
// restarts and processes sharing the file. The row idem_meta.fence holds a reservation: no
// token above it has been issued by anyone. A connection issues from its own block below its
// reservation and writes the row only when the block runs out (once per kBlock acquisitions),
// unless PRAGMA data_version shows another connection committed since it last looked: then it
// re-reads the reservation and jumps above it.
//
// Thread safety: none; used under the store's connection lock.
#pragma once

#include <sqlite3.h>

#include <cstdint>

#include "idem/record.h"
#include "idem/status.h"
#include "store/sqlite/sqlite_statement.h"

namespace idem::internal::sqlite {

class FenceAllocator {
 public:
  static constexpr FencingToken kBlock = 1024;

  // Prepares the statements on `db`, which must outlive this object.
  Status Prepare(sqlite3* db);

  // The next token. REQUIRES: inside BEGIN IMMEDIATE on the connection given to Prepare, so no
  // other connection can write meanwhile.
  Result<FencingToken> Next();

  // Call after a rollback: a reservation written in the rolled-back transaction is gone, so
  // the next call reads it again.
  void Forget() { known_ = false; }

 private:
  sqlite3* db_ = nullptr;
  Statement read_, reserve_, data_version_;
  bool known_ = false;             // reserved_ and data_version_seen_ are current
  int64_t data_version_seen_ = 0;  // PRAGMA data_version when the reservation was last read
  FencingToken reserved_ = 0;      // the reservation in idem_meta.fence
  FencingToken next_ = 1;          // the next token this connection issues
};

}  // namespace idem::internal::sqlite
