-- emit layer: building blocks fail closed on NULLs and bound their inputs (floors, locks, gauges, settle, sweep: 0 to 366 days).
--
-- Schema version 19: the emit layer's functions fail closed on NULLs and bound what they accept,
-- as version 17 made the worker layer's. docs/emit.md ("SQL reference") states every rule.
--
-- Three-valued logic. `IF xmin <= p_xid_bound THEN RETURN NULL` does not return when the bound
-- is NULL, `o.id >= p_from` is never true for a NULL p_from, `LIMIT NULL` is no limit, and
-- unnest() pads the shorter of several arrays with NULLs. Before this version:
--   * idem.outbox_floor / outbox_floors computed a floor without its safety check for a NULL
--     transaction id bound, and one above every pending row for a NULL p_from (or from a NULL
--     last id): a scan from there skips pending rows. A mark's two halves are now required
--     (22023), a last id above the highest id drawn is refused (22023: the floor argument does
--     not hold for ids not drawn yet), and a NULL p_from is "no floor known", a scan from the
--     start.
--   * idem.outbox_lock (both overloads still installed) and the legacy idem.outbox_claim locked
--     every pending row for a NULL limit; a NULL p_after locked nothing, and the relay took
--     that for an empty outbox. Limits are 1 to 10,000 (the relay's --batch), p_after is
--     required, a claim's relay and lease too.
--   * idem.outbox_stats and idem.outbox_lag counted 0 pending rows and 0 s of lag from a NULL
--     p_from (and idem.outbox_stats(from, subjects, any_from) dropped the other subjects' rows
--     below p_from for a NULL p_any_from). A NULL floor is what idem.outbox_floor answers when
--     no floor is known, and the figure that cannot under-report then is the one counted from
--     the start: NULL is read as 0. (A 22023 would turn a gauge read before the first floor
--     into an error, for no safety gained.)
--   * idem.outbox_settle and the legacy idem.outbox_mark_published marked rows published with
--     a NULL stream sequence when their arrays differed in length; idem.outbox_attempt took a
--     batch's first and last ids from its array's ends, so ids not in ascending order hid the
--     record from the next lock's lookup (the attempt and first-attempt time lost). Arrays of
--     one batch must now be non-NULL, of one length and without NULL elements (22023), and the
--     attempt record's span is the ids' minimum and maximum.
--   * idem.outbox_park with a NULL reason parked a row without one; idem.outbox_forget_attempts
--     with a NULL age did nothing, silently: both 22023.
--
-- Bounds. idem.outbox_sweep(keep_days, ahead_days) creates every partition from today to
-- today + ahead_days in one transaction: ahead_days is now 0 to 366, keep_days 0 to 366 (the
-- inbox's bounds, version 17), so at most about 733 day partitions exist, each named
-- outbox_pYYYYMMDD with a four-digit year (the sweep drops by partition bound, not by name,
-- so every partition it can create it can drop). idem.outbox_ensure_partition creates days
-- from 3,660 before today to 366 after it only. Ordering keys go into an index: at most
-- 1,024 bytes, as version 17's ids.
--
-- The sweep's race. The sweep checked a partition for pending rows and then dropped it; a row
-- committed into it between the check and the DROP's locks (an enqueue that computed its day
-- just before midnight, with keep_days 0; or any insert into an old day) was dropped with it.
-- It now takes the locks DROP takes, in DROP's order (the parent, then the partition), and
-- checks again under them through the partial indexes of pending and parked rows (an index
-- probe, not a scan) before it drops. The parent's lock is the one DROP held until the sweep's
-- transaction ended before this version too; the ids it deletes first are those of published
-- rows only, so a row committed meanwhile keeps its event id.

-- ---- partitions and the sweep ---------------------------------------------------------------

-- Creates the partition of day p_day unless it exists; returns whether it created it. 22023
-- for a NULL day, or one more than 3,660 days before or 366 days after today.
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

-- Retention (version 3's contract): drops every day partition older than p_keep_days that
-- holds only published rows, with its events' rows in idem.outbox_ids, then creates the
-- partitions from today through today + p_ahead_days. Returns the partitions dropped. Both
-- arguments 0 to 366 (22023 otherwise). A partition is checked again under its lock before it
-- is dropped, so a row committed into it meanwhile keeps it. lock_timeout 2 s.
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

-- Version 3's contract; an ordering key is at most 1,024 bytes (it goes into an index).
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

-- The arguments every lock and claim shares: a limit of 1 to 10,000 rows, a start id.
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

-- Version 18's lock (018_outbox_relay_subjects_and_held_keys.sql), checking its limit and start id. p_held
-- NULL is no held row; p_floor NULL is 0 (no floor known).
CREATE OR REPLACE FUNCTION idem.outbox_lock(p_limit integer, p_after bigint, p_subjects text[],
                                            p_held bigint[], p_floor bigint)
RETURNS TABLE (id bigint, day integer, event_id text, subject text, payload bytea,
               headers jsonb, first_attempt_age_ms bigint, attempts integer, keyed boolean,
               held_back boolean)
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
           coalesce(c.id > g.first_id, false)
      FROM cand c LEFT JOIN prior p ON p.id = c.id
           LEFT JOIN gap g ON g.ordering_key = c.ordering_key
     ORDER BY c.id;
END $$;

-- Version 14's lock (relays of versions 12 to 17), checking its limit and start id.
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

-- Version 6's claim (relays of version 11 and older), checking its relay, limit and lease.
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

-- Version 12's record of a batch about to be published. 22023 for a NULL or empty batch name
-- (at most 1,024 bytes), or ids NULL, empty or holding a NULL; its span is the ids' lowest
-- and highest, in whatever order they come.
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

-- Version 15's settle (015_outbox_settle_by_day.sql). 22023 for a NULL batch; unless p_ids,
-- p_days, p_seqs and p_dups are non-NULL arrays of one length without NULLs, and p_failed_ids
-- and p_failed_days too; or for a NULL error with failed rows.
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

-- Version 6's mark (relays of version 11 and older), with the settle's array checks.
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

-- Version 12's park; 22023 for a NULL reason (a parked row carries why).
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

-- Version 12's; 22023 for a NULL or negative age.
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

-- ---- floors and gauges ---------------------------------------------------------------------

-- 22023 unless a mark is whole: a last id from 0 up to the highest id drawn, and a
-- transaction id.
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

-- Version 16's floor. 22023 for a mark that is not whole (above); a NULL p_from is 0 (no
-- floor known: the scan starts at the first pending row).
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

-- Version 18's floors, with version 16's rules for the mark and a NULL p_from; a NULL
-- p_covered_from is any_floor.
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

-- Version 18's lag; a NULL p_from is 0 (counted from the first pending row).
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

-- Version 16's gauges from a floor; a NULL p_from is 0.
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

-- Version 18's gauges for a relay taking p_subjects; a NULL p_from or p_any_from is 0.
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
