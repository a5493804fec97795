-- emit layer: the relay's lock and gauges keep their plans (idem.outbox_lock, idem.outbox_stats in PL/pgSQL).
--
-- Schema version 14: idem.outbox_lock and idem.outbox_stats keep their plans for the session.
--
-- Version 12 wrote the relay's lock as a SQL function. PostgreSQL 15 plans the body of a SQL
-- function that it cannot inline (this one has SET clauses and a data-modifying lock) afresh at
-- every call, and the plan of a statement over the partitioned idem.outbox covers every day
-- partition: with the 31 partitions a 30-day retention keeps, a lock of 1,000 rows cost 7.8 ms
-- of which about 4.4 ms was that planning, and a lock of one row (a relay keeping up with a
-- low rate, where this is per event) 4.3 ms against 0.36 ms (a psql loop; docs/emit.md,
-- "Measured"). PL/pgSQL keeps the statement's generic plan for the session. Same signature,
-- same query, same results.
--
-- idem.outbox_stats (the relay's gauges, read every second, idle or not; an operator's query)
-- had the same cost: 3.7 to 4.1 ms a call with 31 partitions, 1.9 ms in PL/pgSQL.

-- The contract is version 12's (012_outbox_claims_as_row_locks.sql): up to p_limit pending rows above
-- p_after locked in the caller's transaction with SKIP LOCKED, in id order, keys whole.
CREATE OR REPLACE FUNCTION idem.outbox_lock(p_limit integer, p_after bigint DEFAULT 0)
RETURNS TABLE (id bigint, day integer, event_id text, subject text, payload bytea,
               headers jsonb, first_attempt_age_ms bigint, attempts integer)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
#variable_conflict use_column
BEGIN
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

-- The relay's gauges (same contract as version 3's): age in seconds of the oldest pending row
-- (0 when none), pending and parked counts.
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
