# The PostgreSQL schema's SQL files, embedded in the binary at build time (cmake/embed_sql.cmake).
# sql/README.md explains how they fit together.

# The current schema, in the order a fresh install applies them (paths under sql/).
set(IDEM_SQL_SCHEMA
  schema/records.sql
  schema/notices.sql
  schema/tiered.sql
  schema/worker.sql
  schema/operations.sql
  schema/outbox.sql)

# The migrations, in order: the Nth takes a database from schema version N - 1 to N, so the
# schema version this build writes is the length of this list. To change the schema, add the
# next file here and bring the files of sql/schema/ to the same end state (the test
# pg_schema_test compares the two).
set(IDEM_SQL_MIGRATIONS
  migrations/001_record_store.sql
  migrations/002_worker_layer.sql
  migrations/003_outbox.sql
  migrations/004_inbox_claims_address_day_partitions.sql
  migrations/005_inbox_claim_fast_path.sql
  migrations/006_outbox_relay_generic_plans.sql
  migrations/007_inbox_claim_one_expression.sql
  migrations/008_outbox_fillfactor_45.sql
  migrations/009_settle_notices.sql
  migrations/010_long_running_operations.sql
  migrations/011_tiered_store.sql
  migrations/012_outbox_claims_as_row_locks.sql
  migrations/013_settle_notices_carry_responses.sql
  migrations/014_outbox_lock_and_stats_in_plpgsql.sql
  migrations/015_outbox_settle_by_day.sql
  migrations/016_outbox_floor.sql
  migrations/017_worker_fails_closed.sql
  migrations/018_outbox_relay_subjects_and_held_keys.sql
  migrations/019_outbox_fails_closed.sql
  migrations/020_outbox_ordering_key_header.sql
  migrations/021_operations_fail_closed.sql)
