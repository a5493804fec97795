-- emit layer: a relay takes only the rows its subjects cover, and its own batches do not hold back their keys' later rows (idem.outbox_subjects_regex, idem.outbox_lock with subjects and held rows, idem.outbox_floors, idem.outbox_lag, idem.outbox_stats with subjects).
--
-- Schema version 18: a relay takes only the rows its subjects cover, and its own batches no
-- longer hold back the later events of their ordering keys.
--
-- Subjects. Up to version 16 a relay locked every pending row and parked the ones its stream's
-- subjects did not cover, so two relays for two streams on one outbox parked each other's
-- rows. idem.outbox_lock now takes the relay's subject patterns (NATS wildcards: '*' one
-- token, a final '>' one or more), translated once per call into one anchored regular
-- expression (idem.outbox_subjects_regex) that the locking scan applies before it locks a
-- row: a row on another subject is never locked, never counted as an attempt, and stays
-- pending for the relay that covers it. Filtering in the scan costs one regular-expression
-- match per pending row passed (PostgreSQL caches the compiled expression per session); a
-- filter applied after the lock would lock, and hold until the batch settles, rows another
-- relay is waiting for. The floor (version 16) gets a second, per-subjects value: the lowest
-- pending id this relay covers, where its scans start, so that rows no running relay covers do
-- not hold its scans down. idem.outbox_stats reports those rows (count, the oldest's age, event
-- id and subject) for the relay's gauges and warning.
--
-- Ordering keys. Version 12's lock returned a keyed row only if every earlier pending row of
-- its key was in the same batch. A relay locks its next batch while the previous ones are
-- being published and settled, so with a few busy keys nearly every batch lost its keyed rows
-- to the batch before it, came back short, and the relay took a short batch for "caught up"
-- and waited for the poll interval: 400 to 600 rows/s where unkeyed rows went at 20,000, the
-- unkeyed rows waiting with the rest. Now the caller passes the keyed rows its own earlier
-- batches hold and publish before this one (p_held): on one connection to the broker they go
-- out in id order, so they count as in line, as the rows of the same batch do. Rows another
-- relay holds still hold back their key's later rows. The check runs once per batch over the
-- batch's distinct keys (one index scan with the keys as an array), where version 12 ran it
-- per keyed row, and the rows it holds back are returned flagged (held_back) so that the relay
-- knows its scan was full and goes on, instead of taking a short batch for an empty outbox.
--
-- Older functions stay as they were, so relays of version 16 and older keep working during an
-- upgrade.

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

-- The relay's lock (version 12's contract otherwise): in the caller's transaction, locks up to
-- p_limit pending rows with ids above p_after whose subject one of p_subjects (NATS patterns)
-- matches, skipping rows other transactions hold, in id order. A row with an ordering key is
-- returned for publishing only if every earlier pending row of its key is in this batch or in
-- p_held: the keyed rows the caller's own earlier batches hold and publish before this one, on
-- the same connection to the broker. Any other earlier pending row of the key (another relay's,
-- one on a subject outside p_subjects, ...) holds it back: it is returned with held_back, stays
-- locked until the transaction ends, and is not to be published. p_floor: no row below it is
-- pending, whatever its subject (0 if unknown); the key check starts there. Returns how long
-- ago each row's first publish attempt was (0 if none), its attempts including this one, and
-- whether it has an ordering key.
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
      -- Per key of the batch, its first pending row below the batch's last that is neither in
      -- the batch nor held by the caller: every row of the key from there on waits.
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

-- The floor (version 16's idem.outbox_floor) twice from one mark: any_floor, the lowest id a
-- pending row can have, scanned from p_from; covered_floor, the lowest id a pending row on a
-- subject of p_subjects can have, scanned from p_covered_from (or any_floor if higher). Both
-- NULL while a transaction up to p_xid_bound still runs, or when the sequence hands out ids in
-- blocks.
CREATE OR REPLACE FUNCTION idem.outbox_floors(p_last_id bigint, p_xid_bound xid8, p_from bigint,
                                              p_covered_from bigint, p_subjects text[],
                                              OUT any_floor bigint, OUT covered_floor bigint)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_subjects text := idem.outbox_subjects_regex(p_subjects);
  v_lowest   bigint;
BEGIN
  IF pg_snapshot_xmin(pg_current_snapshot()) <= p_xid_bound THEN RETURN; END IF;
  IF (SELECT s.seqcache FROM pg_sequence s WHERE s.seqrelid = 'idem.outbox_id_seq'::regclass) <> 1 THEN
    RETURN;
  END IF;
  SELECT o.id INTO v_lowest FROM idem.outbox o
   WHERE o.state = 0 AND o.id >= p_from ORDER BY o.id LIMIT 1;
  any_floor := least(p_last_id + 1, coalesce(v_lowest, p_last_id + 1));
  v_lowest := NULL;
  SELECT o.id INTO v_lowest FROM idem.outbox o
   WHERE o.state = 0 AND o.id >= greatest(p_covered_from, any_floor) AND o.subject ~ v_subjects
   ORDER BY o.id LIMIT 1;
  covered_floor := least(p_last_id + 1, coalesce(v_lowest, p_last_id + 1));
END $$;

-- Seconds since the oldest pending row on a subject of p_subjects (from id p_from) was
-- enqueued; 0 when none.
CREATE OR REPLACE FUNCTION idem.outbox_lag(p_from bigint, p_subjects text[])
RETURNS double precision LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_subjects text := idem.outbox_subjects_regex(p_subjects);
BEGIN
  RETURN coalesce((SELECT extract(epoch FROM clock_timestamp() - o.enqueued_at)
                     FROM idem.outbox o
                    WHERE o.state = 0 AND o.id >= p_from AND o.subject ~ v_subjects
                    ORDER BY o.id LIMIT 1), 0)::float8;
END $$;

-- The relay's gauges for a relay taking p_subjects: the age in seconds of its oldest pending
-- row and its pending rows, counted from p_from (its covered floor); every parked row; and
-- the pending rows on other subjects, counted from p_any_from (the floor of all rows), with
-- the age, event id and subject of the oldest of them (0, NULL, NULL when none). Counting
-- reads every pending row from the lower floor.
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
  v_oldest   bigint;
BEGIN
  lag_seconds := idem.outbox_lag(p_from, p_subjects);
  SELECT count(*) FILTER (WHERE o.id >= p_from AND o.subject ~ v_subjects),
         count(*) FILTER (WHERE o.subject !~ v_subjects),
         min(o.id) FILTER (WHERE o.subject !~ v_subjects)
    INTO pending, other_pending, v_oldest
    FROM idem.outbox o
   WHERE o.state = 0 AND o.id >= least(p_from, p_any_from);
  SELECT count(*) INTO parked FROM idem.outbox o WHERE o.state = 2;
  other_lag_seconds := 0;
  IF v_oldest IS NOT NULL THEN
    SELECT extract(epoch FROM clock_timestamp() - o.enqueued_at), o.event_id, o.subject
      INTO other_lag_seconds, other_event_id, other_subject
      FROM idem.outbox o WHERE o.id = v_oldest AND o.state = 0;
    other_lag_seconds := coalesce(other_lag_seconds, 0);
  END IF;
END $$;
