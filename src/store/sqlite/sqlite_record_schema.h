// The SQLite store's record tables (schema version 1; docs/sqlite-schema.md explains each
// column). Shared by the store, which stamps PRAGMA user_version after creating them, and by
// the worker layer's SQLite intents (src/worker/sqlite_intents.cc), which keep their records
// in the same tables of the caller's database, so store tools see intents too.
#pragma once

namespace idem::internal::sqlite {

// Idempotent: every statement is IF NOT EXISTS / OR IGNORE.
inline constexpr const char* kRecordTables = R"sql(
CREATE TABLE IF NOT EXISTS idem_records (
  tenant            TEXT    NOT NULL,
  client            TEXT    NOT NULL,
  key               TEXT    NOT NULL,
  fingerprint       BLOB    NOT NULL,
  state             INTEGER NOT NULL CHECK (state IN (1, 2)),
  token             INTEGER NOT NULL,
  lease_deadline_ms INTEGER NOT NULL,
  created_ms        INTEGER NOT NULL,
  expires_ms        INTEGER NOT NULL,
  status            INTEGER,
  headers           BLOB,
  body              BLOB,
  PRIMARY KEY (tenant, client, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idem_records_by_expiry ON idem_records (expires_ms);
CREATE TABLE IF NOT EXISTS idem_meta (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO idem_meta (name, value) VALUES ('fence', 0);
)sql";

}  // namespace idem::internal::sqlite
