-- The emit layer: the transactional outbox. A producer records events with
-- idem.outbox_enqueue in its own transaction; `idem relay` publishes them to NATS JetStream
-- and marks them published. docs/emit.md explains the design and states every limit.
--
-- In the fixed schema `idem`, like the worker layer. Everything the relay calls works on
-- generic plans kept for the session (PL/pgSQL, plan_cache_mode = force_generic_plan, jit
-- off): a plan made afresh at each call would cover every day partition.
--
-- Fail closed: NULL arguments and arrays of unequal length are SQLSTATE 22023
-- (invalid_parameter_value), never a silent pass: `LIMIT NULL` is no limit, `o.id >= NULL`
-- matches nothing, and unnest() pads the shorter of several arrays with NULLs, so every
-- argument is checked before it is used. Ordering keys are at most 1,024 bytes; retention and
-- partitions ahead 0 to 366 days; a lock takes 1 to 10,000 rows.
--
-- Relays of earlier idem versions call older forms of the relay's functions (a lease written
-- into each row instead of row locks, a lock without subjects); those forms stay installed,
-- with the same checks, so relays of both versions can run against one outbox during an
-- upgrade. Each section says which forms are current.

CREATE SCHEMA IF NOT EXISTS idem;
-- CACHE 1 (the default): the floor (below) relies on ids being drawn one at a time.
CREATE SEQUENCE IF NOT EXISTS idem.outbox_id_seq;

-- One row per event. Partitioned by the UTC day of enqueue (days since 1970-01-01,
-- idem.outbox_pYYYYMMDD), so published rows are reclaimed by dropping whole days
-- (idem.outbox_sweep). state: 0 pending, 1 published, 2 parked (a bad row the relay will not
-- retry: see `error`). claimed_by and claim_until are the lease of a relay of an earlier
-- version (idem.outbox_claim); current relays hold rows as row locks instead.
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

-- One row per batch a relay is publishing (or left by a relay that died publishing it):
-- committed on another connection before the batch is published, deleted by the settle that
-- marks it. It keeps a row's first attempt time and attempt count across a relay killed
-- between publish and settle: the next lock of those rows reads them from here.
CREATE TABLE IF NOT EXISTS idem.outbox_attempts (
  batch    text        PRIMARY KEY,
  at       timestamptz NOT NULL DEFAULT clock_timestamp(),
  first_id bigint      NOT NULL,
  last_id  bigint      NOT NULL,
  ids      bigint[]    NOT NULL
);
-- A batch's ids (8 KB for 1,000 rows) are compressed when stored; lz4 where the server has it
-- costs a fraction of the default pglz.
DO $$
BEGIN
  ALTER TABLE idem.outbox_attempts ALTER COLUMN ids SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN
  RAISE NOTICE 'idem.outbox_attempts: lz4 unavailable (%), keeping pglz', SQLERRM;
END $$;

-- ---- partitions and the sweep ---------------------------------------------------------------

-- Today's partition key: UTC days since the epoch, by the server's clock.
CREATE OR REPLACE FUNCTION idem.outbox_today() RETURNS integer
LANGUAGE sql VOLATILE AS $$
  SELECT floor(extract(epoch FROM clock_timestamp()) / 86400)::integer
$$;

-- Creates the partition of day p_day unless it exists; returns whether it created it. CREATE +
-- ATTACH (not CREATE ... PARTITION OF): attaching takes only a SHARE UPDATE EXCLUSIVE lock on
-- idem.outbox, so enqueues and the relay carry on meanwhile. Creators take turns on advisory
-- lock (6906989, 20). Partitions are made at fillfactor 45: room on each page for an update
-- of every row on it to stay a HOT update. 22023 for a NULL day, or one more than 3,660 days
-- before or 366 days after today.
CREATE OR REPLACE FUNCTION idem.outbox_ensure_partition(p_day integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_name  text;
  v_today integer;
BEGIN
  IF p_day IS NULL THEN
    RAISE EXCEPTION 'idem.outbox_ensure_partition: day is NULL'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  v_name := 'outbox_p' || to_char(date '1970-01-01' + p_day, 'YYYYMMDD');
  IF to_regclass('idem.' || v_name) IS NOT NULL THEN RETURN false; END IF;
  v_today := idem.outbox_today();
  IF p_day < v_today - 3660 OR p_day > v_today + 366 THEN
    RAISE EXCEPTION 'idem.outbox_ensure_partition: day % is not within 3660 days before and 366 days after today (%)',
      p_day, v_today USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM pg_advisory_xact_lock(6906989, 20);  -- "idm", the outbox partition lock
  IF to_regclass('idem.' || v_name) IS NOT NULL THEN RETURN false; END IF;
  -- fillfactor 45: room on each page for an update of every row on it to stay a HOT update
  -- (schema version 8).
  EXECUTE format('CREATE TABLE idem.%I (LIKE idem.outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS) '
                 'WITH (fillfactor = 45)', v_name);
  EXECUTE format('ALTER TABLE idem.outbox ATTACH PARTITION idem.%I FOR VALUES FROM (%s) TO (%s)',
                 v_name, p_day, p_day + 1);
  RETURN true;
END $$;

-- Retention: drops every day partition older than p_keep_days that holds only published rows
-- (a partition still holding a pending or parked row is kept: nothing is lost), with its
-- events' rows in idem.outbox_ids, then creates the partitions from today through
-- today + p_ahead_days. Returns the partitions dropped. Both arguments 0 to 366 (22023
-- otherwise). A partition is checked again under the locks DROP takes (the parent, then the
-- partition) before it is dropped, so a row committed into it meanwhile keeps it.
-- lock_timeout (2 s) keeps DROP's brief ACCESS EXCLUSIVE lock from queueing behind a long
-- transaction and stalling every enqueue behind it.
CREATE OR REPLACE FUNCTION idem.outbox_sweep(p_keep_days integer DEFAULT 30,
                                             p_ahead_days integer DEFAULT 2)
RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_today   integer := idem.outbox_today();
  v_part    record;
  v_dropped integer := 0;
  v_busy    boolean;
  v_check   text := 'SELECT EXISTS (SELECT 1 FROM %1$s WHERE state = 0) '
                    'OR EXISTS (SELECT 1 FROM %1$s WHERE state = 2)';
BEGIN
  IF p_keep_days IS NULL OR p_keep_days < 0 OR p_keep_days > 366 THEN
    RAISE EXCEPTION 'idem.outbox_sweep: keep_days must be 0 to 366, not %',
      coalesce(p_keep_days::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_ahead_days IS NULL OR p_ahead_days < 0 OR p_ahead_days > 366 THEN
    RAISE EXCEPTION 'idem.outbox_sweep: ahead_days must be 0 to 366, not %',
      coalesce(p_ahead_days::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM set_config('lock_timeout', '2000', true);
  FOR v_part IN
    SELECT c.oid::regclass AS rel,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''?(-?[0-9]+)''?\)')::integer
             AS upper_day
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'idem.outbox'::regclass
  LOOP
    CONTINUE WHEN v_part.upper_day IS NULL OR v_part.upper_day > v_today - p_keep_days;
    EXECUTE format(v_check, v_part.rel) INTO v_busy;
    CONTINUE WHEN v_busy;
    -- The ids of the partition's published events (rows committed after the check above are
    -- pending and keep theirs).
    EXECUTE format('DELETE FROM idem.outbox_ids i USING %s p '
                   'WHERE i.event_id = p.event_id AND p.state = 1', v_part.rel);
    -- The locks DROP takes, in its order (the parent, then the partition), before it: no row
    -- can be added any more, and one committed since the check above is seen now.
    EXECUTE format('LOCK TABLE ONLY idem.outbox, ONLY %s IN ACCESS EXCLUSIVE MODE', v_part.rel);
    EXECUTE format(v_check, v_part.rel) INTO v_busy;
    CONTINUE WHEN v_busy;
    EXECUTE format('DROP TABLE %s', v_part.rel);
    v_dropped := v_dropped + 1;
  END LOOP;
  FOR d IN v_today .. v_today + p_ahead_days LOOP
    PERFORM idem.outbox_ensure_partition(d);
  END LOOP;
  RETURN v_dropped;
END $$;

-- ---- enqueue ----------------------------------------------------------------------------------

-- Records an event in the caller's transaction. True when recorded, false when an event with
-- this id is already in the outbox (pending, published or parked): enqueueing is idempotent.
-- A concurrent enqueue of the same id waits for this transaction to end, then answers false
-- (after COMMIT) or records it itself (after ROLLBACK); under REPEATABLE READ or SERIALIZABLE
-- it fails with a serialization error instead (retry the transaction: it then answers false).
-- With an ordering key, enqueues of the same key are serialised until COMMIT (an advisory lock
-- per distinct key), so per key the id order is the commit order. 22023 for an event id that
-- is not 1 to 255 characters, a subject that is not a NATS subject to publish to, a NULL
-- payload, headers that are not a JSON object of allowed names and string values, or an
-- ordering key over 1,024 bytes or holding a control character (the relay sends the key as a
-- message header, which cannot hold one). NOTIFY idem_outbox wakes relays when the transaction commits.
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
  IF octet_length($5) > 1024 THEN
    RAISE EXCEPTION 'idem.outbox_enqueue: ordering_key must be at most 1024 bytes'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- The relay sends the key as a header value (Idem-Ordering-Key), which cannot hold a line
  -- break.
  IF $5 ~ '[\x01-\x1f\x7f]' THEN
    RAISE EXCEPTION 'idem.outbox_enqueue: ordering_key must not hold control characters (line breaks, tabs, ...): it is sent as the header Idem-Ordering-Key'
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

-- ---- the relay's lock, attempt and settle ------------------------------------------------------
--
-- A relay holds a batch as row locks in a transaction it keeps open while it publishes
-- (idem.outbox_lock, FOR UPDATE SKIP LOCKED), and marks the rows and commits in that same
-- transaction (idem.outbox_settle). The lock is the claim: other relays skip the rows; a relay
-- that dies drops its connection and the rows are free at once; a relay that hangs is cut off
-- by idle_in_transaction_session_timeout, which the relay sets to its claim lease.

-- NATS subject patterns as one anchored POSIX regular expression matching exactly the
-- subjects they match: tokens are separated by '.', a '*' token matches one token, a final
-- '>' token one or more; any other token matches itself (its regular-expression
-- metacharacters escaped). 22023 for no pattern, a NULL or empty one, an empty token or a
-- space, or '>' before the last token.
CREATE OR REPLACE FUNCTION idem.outbox_subjects_regex(p_patterns text[]) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v_pattern text;
  v_tokens  text[];
  v_token   text;
  v_regex   text;
  v_parts   text[] := '{}';
BEGIN
  IF p_patterns IS NULL OR cardinality(p_patterns) = 0 THEN
    RAISE EXCEPTION 'idem.outbox_subjects_regex: no subject patterns'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  FOREACH v_pattern IN ARRAY p_patterns LOOP
    IF v_pattern IS NULL OR v_pattern !~ '^[^\s.]+(\.[^\s.]+)*$' THEN
      RAISE EXCEPTION 'idem.outbox_subjects_regex: % is not a NATS subject pattern (dot-separated non-empty tokens, no spaces)',
        coalesce(quote_literal(v_pattern), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_tokens := string_to_array(v_pattern, '.');
    v_regex := NULL;
    FOR i IN 1 .. cardinality(v_tokens) LOOP
      v_token := v_tokens[i];
      IF v_token = '>' AND i < cardinality(v_tokens) THEN
        RAISE EXCEPTION 'idem.outbox_subjects_regex: in %, ''>'' is not the last token',
          quote_literal(v_pattern) USING ERRCODE = 'invalid_parameter_value';
      END IF;
      v_token := CASE v_token
                   WHEN '>' THEN '.+'
                   WHEN '*' THEN '[^.]+'
                   ELSE regexp_replace(v_token, '([\\^$.|?*+()\[\]{}])', '\\\1', 'g')
                 END;
      v_regex := CASE WHEN v_regex IS NULL THEN v_token ELSE v_regex || '\.' || v_token END;
    END LOOP;
    v_parts := v_parts || v_regex;
  END LOOP;
  RETURN '^(?:' || array_to_string(v_parts, '|') || ')$';
END $$;

-- The arguments every lock and claim shares: a limit of 1 to 10,000 rows, a start id (22023
-- otherwise).
CREATE OR REPLACE FUNCTION idem.outbox_check_lock(p_function text, p_limit integer,
                                                  p_after bigint) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
    RAISE EXCEPTION '%: limit must be 1 to 10000, not %', p_function,
      coalesce(p_limit::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_after IS NULL THEN
    RAISE EXCEPTION '%: after is NULL (0 to start from the first pending row)', p_function
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
END $$;

-- The relay's lock: in the caller's transaction, locks up to p_limit pending rows with ids
-- above p_after whose subject one of p_subjects (NATS patterns) matches, skipping rows other
-- transactions hold and rows under an earlier relay's lease, in id order. The subject filter
-- runs in the locking scan, so a row on another subject is never locked, never counted as an
-- attempt, and stays pending for the relay that covers it. A row with an ordering key is
-- returned for publishing only if every earlier pending row of its key is in this batch or in
-- p_held: the keyed rows the caller's own earlier batches hold and publish before this one, on
-- the same connection to the broker. Any other earlier pending row of the key (another
-- relay's, one on a subject outside p_subjects, ...) holds it back: it is returned with
-- held_back, stays locked until the transaction ends, and is not to be published (the relay
-- then knows its scan was full). p_floor: no row below it is pending, whatever its subject;
-- the key check starts there. Returns how long ago each row's first publish attempt was (0 if
-- none), its attempts including this one, whether it has an ordering key, and the key (the
-- relay sends it as the header Idem-Ordering-Key). p_held NULL is
-- no held row; p_floor NULL is 0 (no floor known).
--
-- p_after lets a relay that already holds batches start past them: stepping over a row that
-- another transaction has locked costs about as much as locking one. A relay must not only
-- ever look past its last id (ids are not committed in order: a row may appear below it
-- later), so it passes 0 regularly.
CREATE OR REPLACE FUNCTION idem.outbox_lock_keyed(p_limit integer, p_after bigint,
                                                  p_subjects text[], p_held bigint[],
                                                  p_floor bigint)
RETURNS TABLE (id bigint, day integer, event_id text, subject text, payload bytea,
               headers jsonb, first_attempt_age_ms bigint, attempts integer, keyed boolean,
               held_back boolean, ordering_key text)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
#variable_conflict use_column
DECLARE
  v_subjects text := idem.outbox_subjects_regex(p_subjects);
  v_floor    bigint := coalesce(p_floor, 0);
BEGIN
  PERFORM idem.outbox_check_lock('idem.outbox_lock', p_limit, p_after);
  RETURN QUERY
    WITH cand AS MATERIALIZED (
      SELECT o.id, o.day, o.event_id, o.subject, o.payload, o.headers, o.ordering_key,
             o.first_attempt_at, o.attempts
        FROM idem.outbox o
       WHERE o.state = 0 AND o.id > p_after AND o.subject ~ v_subjects
         AND (o.claim_until IS NULL OR o.claim_until < clock_timestamp())
       ORDER BY o.id LIMIT p_limit
       FOR UPDATE SKIP LOCKED
    ), span AS (
      SELECT min(c.id) AS lo, max(c.id) AS hi FROM cand c
    ), prior AS (
      SELECT u.id, min(a.at) AS at, count(*)::integer AS n
        FROM idem.outbox_attempts a CROSS JOIN span s CROSS JOIN LATERAL unnest(a.ids) AS u(id)
       WHERE a.first_id <= s.hi AND a.last_id >= s.lo
       GROUP BY u.id
    ), gap AS MATERIALIZED (
      SELECT e.ordering_key, min(e.id) AS first_id
        FROM idem.outbox e
       WHERE e.ordering_key = ANY (ARRAY(SELECT DISTINCT c.ordering_key FROM cand c
                                          WHERE c.ordering_key IS NOT NULL))
         AND e.state = 0 AND e.id >= v_floor AND e.id < (SELECT s.hi FROM span s)
         AND e.id NOT IN (SELECT c.id FROM cand c WHERE c.ordering_key IS NOT NULL
                          UNION ALL
                          SELECT h.id FROM unnest(p_held) AS h(id) WHERE h.id IS NOT NULL)
       GROUP BY e.ordering_key
    )
    SELECT c.id, c.day, c.event_id, c.subject, c.payload, c.headers,
           coalesce((extract(epoch FROM clock_timestamp() - least(c.first_attempt_at, p.at))
                     * 1000)::bigint, 0),
           c.attempts + coalesce(p.n, 0) + 1,
           c.ordering_key IS NOT NULL,
           coalesce(c.id > g.first_id, false),
           c.ordering_key
      FROM cand c LEFT JOIN prior p ON p.id = c.id
           LEFT JOIN gap g ON g.ordering_key = c.ordering_key
     ORDER BY c.id;
END $$;


-- The same lock without the ordering key: relays of earlier versions call it during an
-- upgrade (one body for both).
CREATE OR REPLACE FUNCTION idem.outbox_lock(p_limit integer, p_after bigint, p_subjects text[],
                                            p_held bigint[], p_floor bigint)
RETURNS TABLE (id bigint, day integer, event_id text, subject text, payload bytea,
               headers jsonb, first_attempt_age_ms bigint, attempts integer, keyed boolean,
               held_back boolean)
LANGUAGE sql VOLATILE AS $$
  SELECT k.id, k.day, k.event_id, k.subject, k.payload, k.headers, k.first_attempt_age_ms,
         k.attempts, k.keyed, k.held_back
    FROM idem.outbox_lock_keyed(p_limit, p_after, p_subjects, p_held, p_floor) k
$$;

-- The lock of earlier relays: every subject, and a keyed row only if every earlier pending row
-- of its key is in the same batch.
CREATE OR REPLACE FUNCTION idem.outbox_lock(p_limit integer, p_after bigint DEFAULT 0)
RETURNS TABLE (id bigint, day integer, event_id text, subject text, payload bytea,
               headers jsonb, first_attempt_age_ms bigint, attempts integer)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
#variable_conflict use_column
BEGIN
  PERFORM idem.outbox_check_lock('idem.outbox_lock', p_limit, p_after);
  RETURN QUERY
    WITH cand AS MATERIALIZED (
      SELECT o.id, o.day, o.event_id, o.subject, o.payload, o.headers, o.ordering_key,
             o.first_attempt_at, o.attempts
        FROM idem.outbox o
       WHERE o.state = 0 AND o.id > p_after
         AND (o.claim_until IS NULL OR o.claim_until < clock_timestamp())
       ORDER BY o.id LIMIT p_limit
       FOR UPDATE SKIP LOCKED
    ), span AS (
      SELECT min(c.id) AS lo, max(c.id) AS hi FROM cand c
    ), prior AS (
      SELECT u.id, min(a.at) AS at, count(*)::integer AS n
        FROM idem.outbox_attempts a CROSS JOIN span s CROSS JOIN LATERAL unnest(a.ids) AS u(id)
       WHERE a.first_id <= s.hi AND a.last_id >= s.lo
       GROUP BY u.id
    )
    SELECT c.id, c.day, c.event_id, c.subject, c.payload, c.headers,
           coalesce((extract(epoch FROM clock_timestamp() - least(c.first_attempt_at, p.at))
                     * 1000)::bigint, 0),
           c.attempts + coalesce(p.n, 0) + 1
      FROM cand c LEFT JOIN prior p ON p.id = c.id
     WHERE c.ordering_key IS NULL OR NOT EXISTS (
       SELECT 1 FROM idem.outbox e
        WHERE e.ordering_key = c.ordering_key AND e.state = 0 AND e.id < c.id
          AND NOT EXISTS (SELECT 1 FROM cand c2 WHERE c2.id = e.id))
     ORDER BY c.id;
END $$;

-- The claim of relays older still, which write a lease (claimed_by, claim_until) into each row
-- they take instead of holding a lock: up to p_limit pending rows whose lease is free or ran
-- out, keys whole, leased for p_lease_ms, the attempt counted. 22023 for a NULL relay, a lease
-- under 1 ms, or a limit out of bounds.
CREATE OR REPLACE FUNCTION idem.outbox_claim(p_relay text, p_limit integer, p_lease_ms bigint)
RETURNS TABLE (id bigint, day integer, event_id text, subject text, payload bytea,
               headers jsonb, first_attempt_age_ms bigint, attempts integer)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
#variable_conflict use_column
DECLARE
  v_ids  bigint[];
  v_days integer[];
BEGIN
  IF p_relay IS NULL OR p_lease_ms IS NULL OR p_lease_ms < 1 THEN
    RAISE EXCEPTION 'idem.outbox_claim: relay and a positive lease_ms are required'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM idem.outbox_check_lock('idem.outbox_claim', p_limit, 0);
  WITH cand AS (
    SELECT o.id, o.day, o.ordering_key FROM idem.outbox o
     WHERE o.state = 0 AND (o.claim_until IS NULL OR o.claim_until < clock_timestamp())
     ORDER BY o.id LIMIT p_limit
     FOR UPDATE SKIP LOCKED
  )
  SELECT array_agg(c.id), array_agg(DISTINCT c.day) INTO v_ids, v_days
    FROM cand c
   WHERE c.ordering_key IS NULL OR NOT EXISTS (
     SELECT 1 FROM idem.outbox e
      WHERE e.ordering_key = c.ordering_key AND e.state = 0 AND e.id < c.id
        AND NOT EXISTS (SELECT 1 FROM cand c2 WHERE c2.id = e.id));
  IF v_ids IS NULL THEN RETURN; END IF;
  RETURN QUERY
  WITH claimed AS (
    UPDATE idem.outbox o
       SET claimed_by = p_relay,
           claim_until = clock_timestamp() + p_lease_ms * interval '1 millisecond',
           attempts = o.attempts + 1,
           first_attempt_at = coalesce(o.first_attempt_at, clock_timestamp())
     WHERE o.id = ANY (v_ids) AND o.day = ANY (v_days)
    RETURNING o.id, o.day, o.event_id, o.subject, o.payload, o.headers,
              (extract(epoch FROM clock_timestamp() - o.first_attempt_at) * 1000)::bigint,
              o.attempts
  )
  SELECT * FROM claimed ORDER BY 1;
END $$;

-- Whether p_array is a one-dimensional array of p_count elements, none NULL (false for a NULL
-- array or count). Inlined into its caller's expression.
CREATE OR REPLACE FUNCTION idem.outbox_array_ok(p_array anyarray, p_count integer)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(cardinality(p_array) = p_count
                  AND (p_count = 0 OR (array_ndims(p_array) = 1
                                       AND array_position(p_array, NULL) IS NULL)), false)
$$;

-- Notes that the batch p_batch (rows p_ids) is about to be published. Called on a connection
-- of its own, outside the transaction holding the rows, and committed before the publish. Its
-- span is the ids' lowest and highest, in whatever order they come. 22023 for a NULL or empty
-- batch name (at most 1,024 bytes), or ids NULL, empty or holding a NULL.
CREATE OR REPLACE FUNCTION idem.outbox_attempt(p_batch text, p_ids bigint[])
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF coalesce(p_batch, '') = '' OR octet_length(p_batch) > 1024 THEN
    RAISE EXCEPTION 'idem.outbox_attempt: batch must be 1 to 1024 bytes'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF coalesce(cardinality(p_ids), 0) = 0 OR NOT idem.outbox_array_ok(p_ids, cardinality(p_ids)) THEN
    RAISE EXCEPTION 'idem.outbox_attempt: ids must be a non-empty array without NULLs'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  INSERT INTO idem.outbox_attempts (batch, first_id, last_id, ids)
  SELECT p_batch, min(x), max(x), p_ids FROM unnest(p_ids) AS x
  ON CONFLICT (batch) DO NOTHING;
END $$;

-- In the transaction that locked the rows: marks the published ones (p_ids, p_days, with the
-- stream sequence and duplicate flag of their PubAck) and stamps the failed ones
-- (p_failed_ids, p_failed_days, with p_error), counts the attempt on both (with those of
-- relays that died publishing them, from their records), forgets the batch's attempt record,
-- and returns how many rows it marked. Only pending rows change. The published rows are
-- updated one day partition at a time, so the plan prunes once per day rather than once per
-- row. 22023 for a NULL batch; unless p_ids, p_days, p_seqs and p_dups are non-NULL arrays of
-- one length without NULLs, and p_failed_ids and p_failed_days too; or for a NULL error with
-- failed rows.
CREATE OR REPLACE FUNCTION idem.outbox_settle(p_batch text, p_ids bigint[], p_days integer[],
                                              p_seqs bigint[], p_dups boolean[],
                                              p_failed_ids bigint[], p_failed_days integer[],
                                              p_error text)
RETURNS integer LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_count integer := 0;
  v_rows  integer;
  v_at    timestamptz;
  v_day   integer;
  v_n      integer;
  v_failed integer;
BEGIN
  IF p_batch IS NULL THEN
    RAISE EXCEPTION 'idem.outbox_settle: batch is NULL' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  v_n := cardinality(p_ids);
  v_failed := cardinality(p_failed_ids);
  IF NOT (idem.outbox_array_ok(p_ids, v_n) AND idem.outbox_array_ok(p_days, v_n)
          AND idem.outbox_array_ok(p_seqs, v_n) AND idem.outbox_array_ok(p_dups, v_n)
          AND idem.outbox_array_ok(p_failed_ids, v_failed)
          AND idem.outbox_array_ok(p_failed_days, v_failed)) THEN
    RAISE EXCEPTION 'idem.outbox_settle: ids, days, seqs and dups (and failed ids and days) must be non-NULL arrays of one length without NULL elements'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF cardinality(p_failed_ids) > 0 AND p_error IS NULL THEN
    RAISE EXCEPTION 'idem.outbox_settle: failed rows need an error'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  DELETE FROM idem.outbox_attempts a WHERE a.batch = p_batch RETURNING a.at INTO v_at;
  IF cardinality(p_ids) > 0 THEN
    FOR v_day IN SELECT DISTINCT d FROM unnest(p_days) AS d LOOP
      WITH span AS (
        SELECT min(x) AS lo, max(x) AS hi FROM unnest(p_ids) AS x
      ), prior AS (
        SELECT x.id, min(a.at) AS at, count(*)::integer AS n
          FROM idem.outbox_attempts a CROSS JOIN span s CROSS JOIN LATERAL unnest(a.ids) AS x(id)
         WHERE a.first_id <= s.hi AND a.last_id >= s.lo
         GROUP BY x.id
      )
      UPDATE idem.outbox o
         SET state = 1, published_at = clock_timestamp(), stream_seq = u.seq, duplicate = u.dup,
             claim_until = NULL, error = NULL, attempts = o.attempts + 1 + coalesce(p.n, 0),
             first_attempt_at = coalesce(least(o.first_attempt_at, p.at), v_at, clock_timestamp())
        FROM unnest(p_ids, p_days, p_seqs, p_dups) AS u(id, day, seq, dup)
             LEFT JOIN prior p ON p.id = u.id
       WHERE u.day = v_day AND o.day = v_day AND o.id = u.id AND o.state = 0;
      GET DIAGNOSTICS v_rows = ROW_COUNT;
      v_count := v_count + v_rows;
    END LOOP;
  END IF;
  IF cardinality(p_failed_ids) > 0 THEN
    UPDATE idem.outbox o
       SET error = p_error, attempts = o.attempts + 1,
           first_attempt_at = coalesce(o.first_attempt_at, v_at, clock_timestamp())
      FROM unnest(p_failed_ids, p_failed_days) AS u(id, day)
     WHERE o.id = u.id AND o.day = u.day AND o.state = 0;
  END IF;
  RETURN v_count;
END $$;

-- The mark of relays that claim with a lease (idem.outbox_claim): marks claimed rows
-- published with the stream sequence of their PubAck; only pending rows change; returns how
-- many did. The settle's array checks.
CREATE OR REPLACE FUNCTION idem.outbox_mark_published(p_ids bigint[], p_days integer[],
                                                      p_seqs bigint[], p_dups boolean[])
RETURNS integer LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_count integer;
BEGIN
  IF NOT (idem.outbox_array_ok(p_ids, cardinality(p_ids))
          AND idem.outbox_array_ok(p_days, cardinality(p_ids))
          AND idem.outbox_array_ok(p_seqs, cardinality(p_ids))
          AND idem.outbox_array_ok(p_dups, cardinality(p_ids))) THEN
    RAISE EXCEPTION 'idem.outbox_mark_published: ids, days, seqs and dups must be non-NULL arrays of one length without NULL elements'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  UPDATE idem.outbox o
     SET state = 1, published_at = clock_timestamp(), stream_seq = u.seq, duplicate = u.dup,
         claim_until = NULL, error = NULL
    FROM unnest(p_ids, p_days, p_seqs, p_dups) AS u(id, day, seq, dup)
   WHERE o.id = u.id AND o.day = u.day AND o.state = 0;
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END $$;

-- Gives leased claims back at once (a publish failed for a transient reason) instead of
-- waiting for the lease; only the relay's own claims. The error is kept for operators. For
-- relays that claim with a lease.
CREATE OR REPLACE FUNCTION idem.outbox_release(p_relay text, p_ids bigint[], p_days integer[],
                                               p_error text)
RETURNS integer LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_count integer;
BEGIN
  UPDATE idem.outbox o SET claim_until = NULL, error = p_error
    FROM unnest(p_ids, p_days) AS u(id, day)
   WHERE o.id = u.id AND o.day = u.day AND o.state = 0 AND o.claimed_by = p_relay;
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END $$;

-- Parks a row the relay cannot publish (kept, with the reason, and not retried), counting the
-- attempt that found it bad (a row leased by an older relay has its attempt counted by that
-- claim already). 22023 for a NULL reason: a parked row carries why.
CREATE OR REPLACE FUNCTION idem.outbox_park(p_id bigint, p_day integer, p_error text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF p_error IS NULL THEN
    RAISE EXCEPTION 'idem.outbox_park: the reason is NULL' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  UPDATE idem.outbox o
     SET state = 2, error = p_error, claim_until = NULL,
         attempts = o.attempts + CASE WHEN o.claim_until IS NULL THEN 1 ELSE 0 END
   WHERE o.id = p_id AND o.day = p_day AND o.state = 0;
  RETURN FOUND;
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

-- Deletes the attempt records older than p_older_than_ms none of whose rows is still pending
-- (left by relays that died between publish and settle, once their rows went out again).
-- Returns how many it deleted; 22023 for a NULL or negative age. The relay's sweep runs it.
CREATE OR REPLACE FUNCTION idem.outbox_forget_attempts(p_older_than_ms bigint)
RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_count integer;
BEGIN
  IF p_older_than_ms IS NULL OR p_older_than_ms < 0 THEN
    RAISE EXCEPTION 'idem.outbox_forget_attempts: older_than_ms must be 0 or more, not %',
      coalesce(p_older_than_ms::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
  END IF;
  DELETE FROM idem.outbox_attempts a
   WHERE a.at < clock_timestamp() - p_older_than_ms * interval '1 millisecond'
     AND NOT EXISTS (SELECT 1 FROM idem.outbox o WHERE o.id = ANY (a.ids) AND o.state = 0);
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END $$;

-- ---- floors and gauges -------------------------------------------------------------------------
--
-- A floor is an id below which no row can be pending, so that the relay's scans for pending
-- rows start there instead of at the first entry of the pending-rows index: a published row's
-- entry stays in that partial index until VACUUM removes it, and a scan from the start steps
-- over every such entry.
--
-- Why a floor is safe. Ids come from idem.outbox_id_seq (CACHE 1), and idem.outbox_enqueue
-- writes (so takes its transaction id) before it draws one. Read the sequence's last value L
-- (idem.outbox_last_id), then, in a later transaction, take a transaction id X of one's own
-- (idem.outbox_floor_xid: ids are handed out in order, and a snapshot's xmax is no substitute,
-- being one past the last transaction to finish, not the last to begin); (L, X) is a mark.
-- Every transaction that drew an id up to L had its transaction id before X was taken, so it
-- is below X. Once no transaction below X is running (the snapshot's xmin has passed X),
-- every row with an id up to L is committed or gone for good, and no row can ever again
-- become pending below min(L + 1, the lowest pending id). A row committed late, below ids
-- already published, keeps the floor at or below it until it is published: the floor waits
-- for its transaction. The scan for that minimum starts at the previous floor, so it is cheap
-- too.

-- The first half of a mark: the highest id drawn so far.
CREATE OR REPLACE FUNCTION idem.outbox_last_id()
RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END FROM idem.outbox_id_seq s
$$;

-- The second half of a mark: a transaction id of the caller's own (pg_current_xact_id()). Its
-- commit does not wait for the WAL to reach the disk: a relay takes one every two seconds on
-- its main connection, whose loop should not wait for a disk flush, and a lost commit (the
-- server crashed) only ends the transaction as aborted; the relay drops its mark with the
-- session.
CREATE OR REPLACE FUNCTION idem.outbox_floor_xid()
RETURNS xid8 LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);  -- until this transaction ends
  RETURN pg_current_xact_id();
END $$;

-- 22023 unless a mark is whole: a last id from 0 up to the highest id drawn (the argument does
-- not hold for ids not drawn yet), and a transaction id.
CREATE OR REPLACE FUNCTION idem.outbox_check_mark(p_function text, p_last_id bigint,
                                                  p_xid_bound xid8) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF p_last_id IS NULL OR p_xid_bound IS NULL THEN
    RAISE EXCEPTION '%: a mark is idem.outbox_last_id() then idem.outbox_floor_xid(), neither NULL',
      p_function USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_last_id < 0 OR p_last_id > idem.outbox_last_id() THEN
    RAISE EXCEPTION '%: last id % is not an id drawn from idem.outbox_id_seq', p_function,
      p_last_id USING ERRCODE = 'invalid_parameter_value';
  END IF;
END $$;

-- The lowest id a pending row can have, from a mark (p_last_id, then p_xid_bound) and the floor
-- known before it (p_from; NULL is 0, no floor known: the scan starts at the first pending
-- row). NULL while a transaction up to p_xid_bound still runs (it may yet commit a row with a
-- lower id), or when the sequence hands out ids in blocks (a cache above 1), where the
-- argument does not hold.
CREATE OR REPLACE FUNCTION idem.outbox_floor(p_last_id bigint, p_xid_bound xid8, p_from bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_from   bigint := coalesce(p_from, 0);
  v_lowest bigint;
BEGIN
  PERFORM idem.outbox_check_mark('idem.outbox_floor', p_last_id, p_xid_bound);
  IF pg_snapshot_xmin(pg_current_snapshot()) <= p_xid_bound THEN RETURN NULL; END IF;
  IF (SELECT s.seqcache FROM pg_sequence s WHERE s.seqrelid = 'idem.outbox_id_seq'::regclass) <> 1 THEN
    RETURN NULL;
  END IF;
  SELECT o.id INTO v_lowest FROM idem.outbox o
   WHERE o.state = 0 AND o.id >= v_from ORDER BY o.id LIMIT 1;
  RETURN least(p_last_id + 1, coalesce(v_lowest, p_last_id + 1));
END $$;

-- The floor twice from one mark, for a relay taking p_subjects: any_floor, the lowest id a
-- pending row can have, scanned from p_from; covered_floor, the lowest id a pending row on a
-- subject of p_subjects can have, scanned from p_covered_from (or any_floor if higher; NULL is
-- any_floor), where the relay's scans start, so that rows no running relay covers do not hold
-- them down. Both NULL when idem.outbox_floor would answer NULL; the same rules for the mark
-- and a NULL p_from.
CREATE OR REPLACE FUNCTION idem.outbox_floors(p_last_id bigint, p_xid_bound xid8, p_from bigint,
                                              p_covered_from bigint, p_subjects text[],
                                              OUT any_floor bigint, OUT covered_floor bigint)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_subjects text := idem.outbox_subjects_regex(p_subjects);
  v_from     bigint := coalesce(p_from, 0);
  v_lowest   bigint;
BEGIN
  PERFORM idem.outbox_check_mark('idem.outbox_floors', p_last_id, p_xid_bound);
  IF pg_snapshot_xmin(pg_current_snapshot()) <= p_xid_bound THEN RETURN; END IF;
  IF (SELECT s.seqcache FROM pg_sequence s WHERE s.seqrelid = 'idem.outbox_id_seq'::regclass) <> 1 THEN
    RETURN;
  END IF;
  SELECT o.id INTO v_lowest FROM idem.outbox o
   WHERE o.state = 0 AND o.id >= v_from ORDER BY o.id LIMIT 1;
  any_floor := least(p_last_id + 1, coalesce(v_lowest, p_last_id + 1));
  v_lowest := NULL;
  SELECT o.id INTO v_lowest FROM idem.outbox o
   WHERE o.state = 0 AND o.id >= greatest(coalesce(p_covered_from, 0), any_floor)
     AND o.subject ~ v_subjects
   ORDER BY o.id LIMIT 1;
  covered_floor := least(p_last_id + 1, coalesce(v_lowest, p_last_id + 1));
END $$;

-- Seconds since the oldest pending row on a subject of p_subjects (from id p_from) was
-- enqueued; 0 when none. A NULL p_from is 0 (counted from the first pending row): a NULL floor
-- is what idem.outbox_floor answers when no floor is known, and the figure that cannot
-- under-report then is the one counted from the start.
CREATE OR REPLACE FUNCTION idem.outbox_lag(p_from bigint, p_subjects text[])
RETURNS double precision LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_subjects text := idem.outbox_subjects_regex(p_subjects);
  v_from     bigint := coalesce(p_from, 0);
BEGIN
  RETURN coalesce((SELECT extract(epoch FROM clock_timestamp() - o.enqueued_at)
                     FROM idem.outbox o
                    WHERE o.state = 0 AND o.id >= v_from AND o.subject ~ v_subjects
                    ORDER BY o.id LIMIT 1), 0)::float8;
END $$;

-- The relay's gauges for a relay taking p_subjects: the age in seconds of its oldest pending
-- row and its pending rows, counted from p_from (its covered floor); every parked row; and
-- the pending rows on other subjects, counted from p_any_from (the floor of all rows), with
-- the age, event id and subject of the oldest of them (0, NULL, NULL when none). Counting
-- reads every pending row from the lower floor. A NULL p_from or p_any_from is 0.
CREATE OR REPLACE FUNCTION idem.outbox_stats(p_from bigint, p_subjects text[], p_any_from bigint,
                                             OUT lag_seconds double precision,
                                             OUT pending bigint, OUT parked bigint,
                                             OUT other_pending bigint,
                                             OUT other_lag_seconds double precision,
                                             OUT other_event_id text, OUT other_subject text)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_subjects text := idem.outbox_subjects_regex(p_subjects);
  v_from     bigint := coalesce(p_from, 0);
  v_any_from bigint := coalesce(p_any_from, 0);
  v_oldest   bigint;
BEGIN
  lag_seconds := idem.outbox_lag(v_from, p_subjects);
  SELECT count(*) FILTER (WHERE o.id >= v_from AND o.subject ~ v_subjects),
         count(*) FILTER (WHERE o.subject !~ v_subjects),
         min(o.id) FILTER (WHERE o.subject !~ v_subjects)
    INTO pending, other_pending, v_oldest
    FROM idem.outbox o
   WHERE o.state = 0 AND o.id >= least(v_from, v_any_from);
  SELECT count(*) INTO parked FROM idem.outbox o WHERE o.state = 2;
  other_lag_seconds := 0;
  IF v_oldest IS NOT NULL THEN
    SELECT extract(epoch FROM clock_timestamp() - o.enqueued_at), o.event_id, o.subject
      INTO other_lag_seconds, other_event_id, other_subject
      FROM idem.outbox o WHERE o.id = v_oldest AND o.state = 0;
    other_lag_seconds := coalesce(other_lag_seconds, 0);
  END IF;
END $$;

-- The gauges of earlier relays, over every subject, from a floor (a NULL p_from is 0): age in
-- seconds of the oldest pending row (0 when none), pending and parked counts.
CREATE OR REPLACE FUNCTION idem.outbox_stats(p_from bigint, OUT lag_seconds double precision,
                                             OUT pending bigint, OUT parked bigint)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_from bigint := coalesce(p_from, 0);
BEGIN
  SELECT coalesce((SELECT extract(epoch FROM clock_timestamp() - o.enqueued_at)
                     FROM idem.outbox o WHERE o.state = 0 AND o.id >= v_from
                    ORDER BY o.id LIMIT 1), 0)::float8,
         (SELECT count(*) FROM idem.outbox o WHERE o.state = 0 AND o.id >= v_from),
         (SELECT count(*) FROM idem.outbox o WHERE o.state = 2)
    INTO lag_seconds, pending, parked;
END $$;

-- The same gauges counted from the first pending row, for relays older still.
CREATE OR REPLACE FUNCTION idem.outbox_stats(OUT lag_seconds double precision,
                                             OUT pending bigint, OUT parked bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  SELECT coalesce((SELECT extract(epoch FROM clock_timestamp() - o.enqueued_at)
                     FROM idem.outbox o WHERE o.state = 0 ORDER BY o.id LIMIT 1), 0)::float8,
         (SELECT count(*) FROM idem.outbox o WHERE o.state = 0),
         (SELECT count(*) FROM idem.outbox o WHERE o.state = 2)
    INTO lag_seconds, pending, parked;
END $$;

-- Today's partition and the next two, so that the first enqueues find theirs.
SELECT idem.outbox_sweep(30, 2);
