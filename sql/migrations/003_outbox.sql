-- emit layer: the outbox (schema idem).
--
-- The SQL of the emit layer: the outbox table in schema `idem`, idem.outbox_enqueue (called in
-- the producer's transaction) and the functions `idem relay` claims, marks and parks rows with.
-- It is one migration of the PostgreSQL schema (listed in sql/sql_files.cmake); every
-- statement is idempotent. docs/emit.md explains the design.

CREATE SCHEMA IF NOT EXISTS idem;
CREATE SEQUENCE IF NOT EXISTS idem.outbox_id_seq;

-- One row per event. Partitioned by the UTC day of enqueue (days since 1970-01-01), so
-- published rows are reclaimed by dropping whole days (idem.outbox_sweep). state: 0 pending,
-- 1 published, 2 parked (a bad row the relay will not retry: see `error`).
CREATE TABLE IF NOT EXISTS idem.outbox (
  id               bigint      NOT NULL DEFAULT nextval('idem.outbox_id_seq'),
  day              integer     NOT NULL,
  event_id         text        NOT NULL,
  subject          text        NOT NULL,
  payload          bytea       NOT NULL,
  headers          jsonb       NOT NULL DEFAULT '{}',
  ordering_key     text,
  enqueued_at      timestamptz NOT NULL,
  state            smallint    NOT NULL DEFAULT 0 CHECK (state IN (0, 1, 2)),
  claimed_by       text,
  claim_until      timestamptz,
  attempts         integer     NOT NULL DEFAULT 0,
  first_attempt_at timestamptz,
  published_at     timestamptz,
  stream_seq       bigint,
  duplicate        boolean,
  error            text,
  PRIMARY KEY (id, day)
) PARTITION BY RANGE (day);

-- Event-id uniqueness across all day partitions: one small row per event, checked by the primary
-- key (a unique index on the partitioned table would have to include the day). Row locks, not
-- advisory locks, so a transaction may enqueue any number of events. Trimmed by the sweep
-- together with the day partition its events lived in.
CREATE TABLE IF NOT EXISTS idem.outbox_ids (
  event_id text    PRIMARY KEY,
  day      integer NOT NULL
);

CREATE INDEX IF NOT EXISTS outbox_pending ON idem.outbox (id) WHERE state = 0;
CREATE INDEX IF NOT EXISTS outbox_parked ON idem.outbox (id) WHERE state = 2;
CREATE INDEX IF NOT EXISTS outbox_key_pending ON idem.outbox (ordering_key, id)
  WHERE state = 0 AND ordering_key IS NOT NULL;

-- Today's partition key: UTC days since the epoch, by the server's clock.
CREATE OR REPLACE FUNCTION idem.outbox_today() RETURNS integer
LANGUAGE sql VOLATILE AS $$
  SELECT floor(extract(epoch FROM clock_timestamp()) / 86400)::integer
$$;

-- Creates the partition of day p_day unless it exists; returns whether it created it. CREATE +
-- ATTACH (not CREATE ... PARTITION OF): attaching takes only a SHARE UPDATE EXCLUSIVE lock on
-- idem.outbox, so enqueues and the relay carry on meanwhile.
CREATE OR REPLACE FUNCTION idem.outbox_ensure_partition(p_day integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_name text := 'outbox_p' || to_char(date '1970-01-01' + p_day, 'YYYYMMDD');
BEGIN
  IF to_regclass('idem.' || v_name) IS NOT NULL THEN RETURN false; END IF;
  PERFORM pg_advisory_xact_lock(6906989, 20);  -- "idm", the outbox partition lock
  IF to_regclass('idem.' || v_name) IS NOT NULL THEN RETURN false; END IF;
  -- fillfactor 80: room on each page for the claim's update to stay a HOT update.
  EXECUTE format('CREATE TABLE idem.%I (LIKE idem.outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS) '
                 'WITH (fillfactor = 80)', v_name);
  EXECUTE format('ALTER TABLE idem.outbox ATTACH PARTITION idem.%I FOR VALUES FROM (%s) TO (%s)',
                 v_name, p_day, p_day + 1);
  RETURN true;
END $$;

-- Records an event in the caller's transaction. True when recorded, false when an event with
-- this id is already in the outbox (pending, published or parked): enqueueing is idempotent.
-- A concurrent enqueue of the same id waits for this transaction to end, then answers false
-- (after COMMIT) or records it itself (after ROLLBACK); under REPEATABLE READ or SERIALIZABLE
-- it fails with a serialization error instead (retry the transaction: it then answers false).
-- With an ordering key, enqueues of the same key are serialised until COMMIT (an advisory lock
-- per distinct key), so per key the id order is the commit order.
CREATE OR REPLACE FUNCTION idem.outbox_enqueue(event_id text, subject text, payload bytea,
                                               headers jsonb DEFAULT '{}',
                                               ordering_key text DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
  v_day integer;
BEGIN
  IF $1 IS NULL OR length($1) = 0 OR length($1) > 255 THEN
    RAISE EXCEPTION 'idem.outbox_enqueue: event_id must be 1 to 255 characters'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF $2 IS NULL OR $2 !~ '^[^\s*>.]+(\.[^\s*>.]+)*$' THEN
    RAISE EXCEPTION 'idem.outbox_enqueue: subject % is not a NATS subject to publish to (dot-separated tokens, no spaces or wildcards)', $2
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF $3 IS NULL THEN
    RAISE EXCEPTION 'idem.outbox_enqueue: payload is NULL' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- Header names: visible ASCII without a colon, not Nats-* (the relay sets Nats-Msg-Id, and
  -- JetStream's other Nats-* headers would change how the stream treats the message). Values:
  -- strings without line breaks.
  IF $4 IS NULL OR jsonb_typeof($4) <> 'object'
     OR EXISTS (SELECT 1 FROM jsonb_each($4) h
                 WHERE jsonb_typeof(h.value) <> 'string' OR h.key !~ '^[!-9;-~]+$'
                    OR lower(h.key) LIKE 'nats-%' OR (h.value #>> '{}') ~ '[\r\n]') THEN
    RAISE EXCEPTION 'idem.outbox_enqueue: headers must be a JSON object of string values without line breaks, with header names of visible ASCII, no colon, not Nats-*'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  v_day := idem.outbox_today();
  INSERT INTO idem.outbox_ids (event_id, day) VALUES ($1, v_day) ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN RETURN false; END IF;
  IF $5 IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(hashtextextended('idem.outbox.key:' || $5, 0));
  END IF;
  PERFORM idem.outbox_ensure_partition(v_day);
  INSERT INTO idem.outbox (day, event_id, subject, payload, headers, ordering_key, enqueued_at)
  VALUES (v_day, $1, $2, $3, $4, $5, clock_timestamp());
  PERFORM pg_notify('idem_outbox', '');
  RETURN true;
END $$;

-- The relay's claim: up to p_limit pending rows whose claim is free or whose lease ran out,
-- locked with SKIP LOCKED so relays never wait for each other, in id order. A row with an
-- ordering key is taken only if every earlier pending row of its key is taken with it, so a
-- key's events are held by one relay at a time and go out in order. Sets the lease, counts
-- the attempt and stamps the first attempt; returns how long ago that first attempt was.
CREATE OR REPLACE FUNCTION idem.outbox_claim(p_relay text, p_limit integer, p_lease_ms bigint)
RETURNS TABLE (id bigint, day integer, event_id text, subject text, payload bytea,
               headers jsonb, first_attempt_age_ms bigint, attempts integer)
LANGUAGE plpgsql VOLATILE AS $$
-- PL/pgSQL, not SQL: its statement plan is kept for the session, where a SQL function would
-- plan this query over every partition at each call.
#variable_conflict use_column
BEGIN
  RETURN QUERY
  WITH cand AS (
    SELECT o.id, o.day, o.ordering_key FROM idem.outbox o
     WHERE o.state = 0 AND (o.claim_until IS NULL OR o.claim_until < clock_timestamp())
     ORDER BY o.id LIMIT p_limit
     FOR UPDATE SKIP LOCKED
  ), keep AS (
    SELECT c.id, c.day FROM cand c
     WHERE c.ordering_key IS NULL OR NOT EXISTS (
       SELECT 1 FROM idem.outbox e
        WHERE e.ordering_key = c.ordering_key AND e.state = 0 AND e.id < c.id
          AND NOT EXISTS (SELECT 1 FROM cand c2 WHERE c2.id = e.id))
  ), claimed AS (
    UPDATE idem.outbox o
       SET claimed_by = p_relay,
           claim_until = clock_timestamp() + p_lease_ms * interval '1 millisecond',
           attempts = o.attempts + 1,
           first_attempt_at = coalesce(o.first_attempt_at, clock_timestamp())
      FROM keep k
     WHERE o.id = k.id AND o.day = k.day
    RETURNING o.id, o.day, o.event_id, o.subject, o.payload, o.headers,
              (extract(epoch FROM clock_timestamp() - o.first_attempt_at) * 1000)::bigint,
              o.attempts
  )
  SELECT * FROM claimed ORDER BY 1;
END $$;

-- Marks claimed rows published with the stream sequence of their PubAck. Only pending rows
-- change; returns how many did.
CREATE OR REPLACE FUNCTION idem.outbox_mark_published(p_ids bigint[], p_days integer[],
                                                      p_seqs bigint[], p_dups boolean[])
RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_count integer;
BEGIN
  UPDATE idem.outbox o
     SET state = 1, published_at = clock_timestamp(), stream_seq = u.seq, duplicate = u.dup,
         claim_until = NULL, error = NULL
    FROM unnest(p_ids, p_days, p_seqs, p_dups) AS u(id, day, seq, dup)
   WHERE o.id = u.id AND o.day = u.day AND o.state = 0;
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END $$;

-- Parks a row the relay cannot publish (it is kept, with the reason, and not retried).
CREATE OR REPLACE FUNCTION idem.outbox_park(p_id bigint, p_day integer, p_error text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  UPDATE idem.outbox o SET state = 2, error = p_error, claim_until = NULL
   WHERE o.id = p_id AND o.day = p_day AND o.state = 0;
  RETURN FOUND;
END $$;

-- Gives claims back at once (a publish failed for a transient reason) instead of waiting for
-- the lease; only the relay's own claims. The error is kept for operators.
CREATE OR REPLACE FUNCTION idem.outbox_release(p_relay text, p_ids bigint[], p_days integer[],
                                               p_error text)
RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_count integer;
BEGIN
  UPDATE idem.outbox o SET claim_until = NULL, error = p_error
    FROM unnest(p_ids, p_days) AS u(id, day)
   WHERE o.id = u.id AND o.day = u.day AND o.state = 0 AND o.claimed_by = p_relay;
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END $$;

-- For operators: puts a parked event back in line (after fixing the stream, say).
CREATE OR REPLACE FUNCTION idem.outbox_unpark(p_event_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  UPDATE idem.outbox o SET state = 0, claim_until = NULL
    FROM idem.outbox_ids i
   WHERE i.event_id = p_event_id AND o.day = i.day AND o.event_id = p_event_id AND o.state = 2;
  RETURN FOUND;
END $$;

-- The relay's gauges: age in seconds of the oldest pending row (0 when none), pending and
-- parked counts.
CREATE OR REPLACE FUNCTION idem.outbox_stats(OUT lag_seconds double precision,
                                             OUT pending bigint, OUT parked bigint)
LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT extract(epoch FROM clock_timestamp() - o.enqueued_at)
                     FROM idem.outbox o WHERE o.state = 0 ORDER BY o.id LIMIT 1), 0)::float8,
         (SELECT count(*) FROM idem.outbox o WHERE o.state = 0),
         (SELECT count(*) FROM idem.outbox o WHERE o.state = 2)
$$;

-- Retention: drops every day partition older than p_keep_days that holds only published
-- rows (a partition still holding a pending or parked row is kept: nothing is lost), with its
-- events' rows in idem.outbox_ids (one bulk delete by primary key per dropped day), then
-- creates the partitions from today through today + p_ahead_days. Returns the partitions
-- dropped. lock_timeout keeps DROP's brief ACCESS EXCLUSIVE lock from queueing behind a long
-- transaction and stalling every enqueue behind it.
CREATE OR REPLACE FUNCTION idem.outbox_sweep(p_keep_days integer DEFAULT 30,
                                             p_ahead_days integer DEFAULT 2)
RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_today integer := idem.outbox_today();
  v_part record;
  v_dropped integer := 0;
  v_busy boolean;
BEGIN
  PERFORM set_config('lock_timeout', '2000', true);
  FOR v_part IN
    SELECT c.oid::regclass AS rel,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''?(-?[0-9]+)''?\)')::integer
             AS upper_day
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'idem.outbox'::regclass
  LOOP
    IF v_part.upper_day IS NOT NULL AND v_part.upper_day <= v_today - p_keep_days THEN
      EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s WHERE state <> 1)', v_part.rel) INTO v_busy;
      IF NOT v_busy THEN
        EXECUTE format('DELETE FROM idem.outbox_ids i USING %s p WHERE i.event_id = p.event_id',
                       v_part.rel);
        EXECUTE format('DROP TABLE %s', v_part.rel);
        v_dropped := v_dropped + 1;
      END IF;
    END IF;
  END LOOP;
  FOR d IN v_today .. v_today + p_ahead_days LOOP
    PERFORM idem.outbox_ensure_partition(d);
  END LOOP;
  RETURN v_dropped;
END $$;

SELECT idem.outbox_sweep(30, 2);
