-- record store (idem_records and its functions, in the store schema).
--
-- The SQL of the PostgreSQL store's schema, one constant per version. docs/postgresql.md
-- explains each table, column and function.
--
-- Version 1. Every statement is idempotent, so a half-applied migration (impossible inside its
-- transaction, but cheap to allow) can simply be run again.

CREATE SEQUENCE IF NOT EXISTS idem_fence_seq;

CREATE TABLE IF NOT EXISTS idem_records (
  scope_id          bytea    NOT NULL,
  tenant            text     NOT NULL,
  client            text     NOT NULL,
  key               text     NOT NULL,
  fingerprint       bytea    NOT NULL,
  state             smallint NOT NULL CHECK (state IN (1, 2)),
  token             bigint   NOT NULL,
  lease_deadline_ms bigint   NOT NULL,
  created_ms        bigint   NOT NULL,
  expires_ms        bigint   NOT NULL,
  response          bytea,
  PRIMARY KEY (scope_id, expires_ms)
) PARTITION BY RANGE (expires_ms);

-- "Now" in Unix milliseconds: the caller's clock when given, else the server's.
CREATE OR REPLACE FUNCTION idem_now(p_now bigint) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
$$;

-- Serialises every mutation of one scope until the end of the calling transaction.
CREATE OR REPLACE FUNCTION idem_lock_scope(p_scope_id bytea) RETURNS void
LANGUAGE sql VOLATILE AS $$
  SELECT pg_advisory_xact_lock(
    ('x' || encode(substring(p_scope_id FROM 1 FOR 8), 'hex'))::bit(64)::bigint)
$$;

-- Creates the partition for the UTC day holding p_ms unless it exists. Returns whether it
-- created one. CREATE + ATTACH rather than CREATE ... PARTITION OF: attaching takes only a
-- SHARE UPDATE EXCLUSIVE lock on idem_records, so reads and writes carry on meanwhile.
CREATE OR REPLACE FUNCTION idem_ensure_partition(p_ms bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_from bigint := floor(p_ms / 86400000.0)::bigint * 86400000;
  v_name text := 'idem_records_p' ||
                 to_char(to_timestamp(v_from / 1000.0) AT TIME ZONE 'UTC', 'YYYYMMDD');
BEGIN
  IF to_regclass(quote_ident(v_name)) IS NOT NULL THEN RETURN false; END IF;
  PERFORM pg_advisory_xact_lock(6906989, 2);  -- kLockNamespace, kPartitionLock
  IF to_regclass(quote_ident(v_name)) IS NOT NULL THEN RETURN false; END IF;
  BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE idem_records INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                   v_name);
    EXECUTE format('ALTER TABLE idem_records ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                   v_name, v_from, v_from + 86400000);
  EXCEPTION WHEN duplicate_table THEN
    RETURN false;  -- created meanwhile by another session
  END;
  RETURN true;
END $$;

-- Creates the partitions for every UTC day from now's through now + p_horizon_ms.
CREATE OR REPLACE FUNCTION idem_ensure_partitions(p_now bigint, p_horizon_ms bigint)
RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint := idem_now(p_now);
  v_day bigint := floor(v_now / 86400000.0)::bigint * 86400000;
  v_created integer := 0;
BEGIN
  WHILE v_day <= v_now + p_horizon_ms LOOP
    IF idem_ensure_partition(v_day) THEN v_created := v_created + 1; END IF;
    v_day := v_day + 86400000;
  END LOOP;
  RETURN v_created;
END $$;

-- Begin: o_outcome 1 acquired, 2 taken over, 3 replay, 4 in flight, 5 mismatch.
CREATE OR REPLACE FUNCTION idem_begin(
    p_scope_id bytea, p_tenant text, p_client text, p_key text, p_fingerprint bytea,
    p_lease_ms bigint, p_abandoned_ms bigint, p_now bigint,
    OUT o_outcome smallint, OUT o_token bigint, OUT o_previous_token bigint,
    OUT o_retry_after_ms bigint, OUT o_response bytea)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
  v_row idem_records%ROWTYPE;
  v_live boolean;
  v_deadline bigint;
  v_expires bigint;
  v_retried boolean := false;
BEGIN
  -- Under REPEATABLE READ or SERIALIZABLE the read below would use a snapshot older than the
  -- lock, and a duplicate could miss the row its predecessor just committed.
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'idem_begin needs READ COMMITTED isolation, not %',
      current_setting('transaction_isolation') USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  SELECT * INTO v_row FROM idem_records r
   WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now
   ORDER BY r.expires_ms DESC LIMIT 1;
  v_live := FOUND;
  IF v_live THEN
    IF v_row.fingerprint <> p_fingerprint THEN o_outcome := 5; RETURN; END IF;
    IF v_row.state = 2 THEN o_outcome := 3; o_response := v_row.response; RETURN; END IF;
    IF v_now < v_row.lease_deadline_ms THEN
      o_outcome := 4;
      o_retry_after_ms := greatest(1, v_row.lease_deadline_ms - v_now);
      RETURN;
    END IF;
  END IF;
  o_token := nextval('idem_fence_seq');
  v_deadline := v_now + p_lease_ms;
  v_expires := v_deadline + p_abandoned_ms;
  LOOP
    BEGIN
      IF v_live THEN
        UPDATE idem_records r
           SET token = o_token, lease_deadline_ms = v_deadline, expires_ms = v_expires
         WHERE r.scope_id = p_scope_id AND r.expires_ms = v_row.expires_ms;
        o_outcome := 2;
        o_previous_token := v_row.token;
      ELSE
        INSERT INTO idem_records (scope_id, tenant, client, key, fingerprint, state, token,
                                  lease_deadline_ms, created_ms, expires_ms)
        VALUES (p_scope_id, p_tenant, p_client, p_key, p_fingerprint, 1, o_token,
                v_deadline, v_now, v_expires);
        o_outcome := 1;
      END IF;
      RETURN;
    EXCEPTION WHEN check_violation THEN  -- 23514: no partition for the row's day
      IF v_retried OR NOT idem_ensure_partition(v_expires) THEN RAISE; END IF;
      v_retried := true;
    END;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION idem_complete(
    p_scope_id bytea, p_token bigint, p_response bytea, p_ttl_ms bigint, p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
  v_expires bigint;
  v_retried boolean := false;
BEGIN
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  v_expires := v_now + p_ttl_ms;
  LOOP
    BEGIN
      UPDATE idem_records r SET state = 2, expires_ms = v_expires, response = p_response
       WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now AND r.state = 1
         AND r.token = p_token;
      RETURN FOUND;
    EXCEPTION WHEN check_violation THEN
      IF v_retried OR NOT idem_ensure_partition(v_expires) THEN RAISE; END IF;
      v_retried := true;
    END;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION idem_release(p_scope_id bytea, p_token bigint, p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
BEGIN
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  DELETE FROM idem_records r
   WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now AND r.state = 1
     AND r.token = p_token;
  RETURN FOUND;
END $$;

CREATE OR REPLACE FUNCTION idem_purge(p_scope_id bytea, p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
BEGIN
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  DELETE FROM idem_records r WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now;
  RETURN FOUND;
END $$;

-- Drops every partition whose upper bound is at or before now (all its rows have expired),
-- then creates the partitions up to now + p_horizon_ms. Returns the rows dropped (counted
-- before each drop). lock_timeout keeps DROP's brief ACCESS EXCLUSIVE lock from queueing
-- behind a long transaction and stalling every writer behind it.
CREATE OR REPLACE FUNCTION idem_sweep(p_now bigint, p_horizon_ms bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint := idem_now(p_now);
  v_part record;
  v_rows bigint;
  v_dropped bigint := 0;
BEGIN
  PERFORM set_config('lock_timeout', '2000', true);
  FOR v_part IN
    SELECT c.oid::regclass AS rel,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''?(-?[0-9]+)''?\)')::bigint
             AS upper_ms
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'idem_records'::regclass
  LOOP
    IF v_part.upper_ms IS NOT NULL AND v_part.upper_ms <= v_now THEN
      EXECUTE format('SELECT count(*) FROM %s', v_part.rel) INTO v_rows;
      EXECUTE format('DROP TABLE %s', v_part.rel);
      v_dropped := v_dropped + v_rows;
    END IF;
  END LOOP;
  PERFORM idem_ensure_partitions(v_now, p_horizon_ms);
  RETURN v_dropped;
END $$;
