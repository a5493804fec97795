-- The record store: idempotency records and the functions the gateway calls on them.
--
-- Everything here lives in the store's schema (the store URL's `schema=`, default public):
-- idem runs this file with search_path set to that schema, and names nothing
-- schema-qualified. Each store operation is one call of one function below, which takes the
-- scope's advisory lock (idem_lock_scope) first, so operations on one key take turns until
-- the calling transaction ends. docs/postgresql.md explains the design.
--
-- Times are Unix milliseconds. Every function taking p_now uses the caller's clock when it is
-- given and the server's when it is NULL (idem_now). Every statement is idempotent, so a
-- database where part of this already exists gets the same objects again.

-- Fencing tokens: each claim of a key gets the next value, so a later owner's token is larger.
CREATE SEQUENCE IF NOT EXISTS idem_fence_seq;

-- One row per live key. scope_id is the SHA-256 of the record's tenant, client and key (as
-- pg_calls.cc ScopeId encodes them); state 1 is in flight, 2 completed (with `response`).
-- Partitioned by the UTC day of expires_ms, so expired rows go by dropping whole days
-- (idem_sweep); every query filters expires_ms > now, so an expired row in a live partition
-- is invisible. `waited`: a waiter asked to be told when this in-flight record settles
-- (idem_watch), so its completion, release or purge sends a settle notice (notices.sql).
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
  waited            boolean  NOT NULL DEFAULT false,
  PRIMARY KEY (scope_id, expires_ms)
) PARTITION BY RANGE (expires_ms);

-- ---- time, locks, partitions ------------------------------------------------------------------

-- "Now" in Unix milliseconds: the caller's clock when given, else the server's.
CREATE OR REPLACE FUNCTION idem_now(p_now bigint) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
$$;

-- Serialises every mutation of one scope until the end of the calling transaction (a
-- one-bigint advisory lock on the scope id's first 8 bytes).
CREATE OR REPLACE FUNCTION idem_lock_scope(p_scope_id bytea) RETURNS void
LANGUAGE sql VOLATILE AS $$
  SELECT pg_advisory_xact_lock(
    ('x' || encode(substring(p_scope_id FROM 1 FOR 8), 'hex'))::bit(64)::bigint)
$$;

-- Creates the partition for the UTC day holding p_ms (idem_records_pYYYYMMDD) unless it
-- exists; returns whether it created one. CREATE + ATTACH rather than CREATE ... PARTITION OF:
-- attaching takes only a SHARE UPDATE EXCLUSIVE lock on idem_records, so reads and writes
-- carry on meanwhile. Creators take turns on advisory lock (6906989, 2).
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

-- Creates the partitions for every UTC day from now's through now + p_horizon_ms; returns how
-- many it created. The store calls it on open and from its sweep.
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

-- ---- the record state machine ---------------------------------------------------------------

-- Begins a request on a key. o_outcome:
--   1 acquired     no live record: a new in-flight one owned by o_token
--   2 taken over   the live in-flight record's lease ran out: it is now o_token's (its
--                  accepted response cleared); o_previous_token was the owner before
--   3 replay       the live record is completed: o_response is its response
--   4 in flight    another owner's lease is live: retry after o_retry_after_ms; o_response is
--                  the record's accepted response (a long-running operation's 202), or NULL
--   5 mismatch     the live record belongs to another request (fingerprint differs; a NULL
--                  fingerprint never matches)
-- A new record is in flight for p_lease_ms and kept p_abandoned_ms after that. Needs READ
-- COMMITTED: under REPEATABLE READ or SERIALIZABLE the read after the lock would use a
-- snapshot older than the lock, and a duplicate could miss the row its predecessor just
-- committed (SQLSTATE 55000). A missing day partition is created and the write retried once.
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
    IF v_row.fingerprint IS DISTINCT FROM p_fingerprint THEN o_outcome := 5; RETURN; END IF;
    IF v_row.state = 2 THEN o_outcome := 3; o_response := v_row.response; RETURN; END IF;
    IF v_now < v_row.lease_deadline_ms THEN
      o_outcome := 4;
      o_retry_after_ms := greatest(1, v_row.lease_deadline_ms - v_now);
      o_response := v_row.response;
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
           SET token = o_token, lease_deadline_ms = v_deadline, expires_ms = v_expires,
               response = NULL
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

-- Completes the in-flight record owned by p_token with p_response, kept p_ttl_ms from now.
-- False (nothing changes) when p_token does not own a live in-flight record: a zombie owner
-- cannot overwrite its successor's result, and a completed record is never written again. A
-- watched record sends its settle notice, carrying the response (idem_notify_completed).
CREATE OR REPLACE FUNCTION idem_complete(
    p_scope_id bytea, p_token bigint, p_response bytea, p_ttl_ms bigint, p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
  v_expires bigint;
  v_row record;
  v_retried boolean := false;
BEGIN
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  v_expires := v_now + p_ttl_ms;
  LOOP
    BEGIN
      UPDATE idem_records r SET state = 2, expires_ms = v_expires, response = p_response
       WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now AND r.state = 1
         AND r.token = p_token
      RETURNING r.waited, r.tenant, r.client, r.key, r.fingerprint INTO v_row;
      IF NOT FOUND THEN RETURN false; END IF;
      PERFORM idem_notify_completed(v_row.waited, v_row.tenant, v_row.client, v_row.key,
                                    v_row.fingerprint, p_response);
      RETURN true;
    EXCEPTION WHEN check_violation THEN
      IF v_retried OR NOT idem_ensure_partition(v_expires) THEN RAISE; END IF;
      v_retried := true;
    END;
  END LOOP;
END $$;

-- Gives up the in-flight record owned by p_token (deletes it: the next request executes
-- afresh). False when p_token does not own it. A watched record sends its settle notice.
CREATE OR REPLACE FUNCTION idem_release(p_scope_id bytea, p_token bigint, p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
  v_row record;
BEGIN
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  DELETE FROM idem_records r
   WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now AND r.state = 1
     AND r.token = p_token
  RETURNING r.waited, r.tenant, r.client, r.key INTO v_row;
  IF NOT FOUND THEN RETURN false; END IF;
  PERFORM idem_notify_settled(v_row.waited, v_row.tenant, v_row.client, v_row.key);
  RETURN true;
END $$;

-- Deletes the scope's live record, whatever its state or owner (the admin API's purge). False
-- when there is none. A watched record sends its settle notice.
CREATE OR REPLACE FUNCTION idem_purge(p_scope_id bytea, p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
  v_row record;
  v_found boolean := false;
BEGIN
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  FOR v_row IN
    DELETE FROM idem_records r WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now
    RETURNING r.waited, r.tenant, r.client, r.key
  LOOP
    v_found := true;
    PERFORM idem_notify_settled(v_row.waited, v_row.tenant, v_row.client, v_row.key);
  END LOOP;
  RETURN v_found;
END $$;

-- Keeps the in-flight record owned by p_token in flight with p_response as its accepted
-- response (a long-running operation's 202, handed to duplicates by idem_begin) and a lease of
-- p_lease_ms from now, kept p_abandoned_ms after it. False when the token does not own it.
CREATE OR REPLACE FUNCTION idem_accept(
    p_scope_id bytea, p_token bigint, p_response bytea, p_lease_ms bigint, p_abandoned_ms bigint,
    p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
  v_expires bigint;
  v_retried boolean := false;
BEGIN
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  v_expires := v_now + p_lease_ms + p_abandoned_ms;
  LOOP
    BEGIN
      UPDATE idem_records r
         SET lease_deadline_ms = v_now + p_lease_ms, expires_ms = v_expires,
             response = p_response
       WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now AND r.state = 1
         AND r.token = p_token;
      RETURN FOUND;
    EXCEPTION WHEN check_violation THEN
      IF v_retried OR NOT idem_ensure_partition(v_expires) THEN RAISE; END IF;
      v_retried := true;
    END;
  END LOOP;
END $$;

-- ---- retention ---------------------------------------------------------------------------------

-- Drops every partition whose upper bound is at or before now (all its rows have expired),
-- then creates the partitions up to now + p_horizon_ms. Returns the rows dropped (counted
-- before each drop). lock_timeout (2 s) keeps DROP's brief ACCESS EXCLUSIVE lock from queueing
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
