-- emit layer: the relay's lock answers each row's ordering key, sent as the header Idem-Ordering-Key (idem.outbox_lock_keyed); idem.outbox_enqueue refuses keys with control characters.
--
-- The relay publishes a row's ordering key as the message header
-- Idem-Ordering-Key, so a consumer can keep each key's order (docs/emit.md, "Ordering keys").
--
-- The lock returns the key. idem.outbox_lock_keyed(limit, after, subjects, held, floor) is
-- version 19's idem.outbox_lock with one more column, ordering_key (NULL for a row without
-- one). A new name rather than a new result for the old one: relays of version 19 keep
-- calling idem.outbox_lock, unchanged, during an upgrade, and every migration still runs
-- over a newer schema (a function's result type cannot be changed by CREATE OR REPLACE).
--
-- Keys a header can carry. A NATS header value cannot hold a line break (CR or LF would end
-- the header line and start another one: the rest of the key would become a header of its
-- own). idem.outbox_enqueue now refuses an ordering key holding a control character (U+0001
-- to U+001F, U+007F) with 22023, as it refuses such header values. A row enqueued before this
-- version with such a key is still published: the relay percent-encodes those characters
-- (and '%') in the header's value, which keeps rows of one key under one value.

-- ---- enqueue: keys a header can carry ---------------------------------------------------------

-- Version 19's enqueue; an ordering key also holds no control character.
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

-- ---- the relay's lock, with each row's ordering key -------------------------------------------

-- Version 19's lock (idem.outbox_lock(limit, after, subjects, held, floor)), answering each
-- row's ordering key too.
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

-- Version 19's lock, for relays of versions 18 and 19 during an upgrade: the same rows, without
-- the key (one body for both).
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
