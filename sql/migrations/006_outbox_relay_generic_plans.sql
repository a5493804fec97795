-- emit layer: the relay's claim and mark on kept plans.
--
-- Schema version 6: the relay's claim, mark and release run on kept (generic) plans, without JIT.
--
-- Version 3's functions let PL/pgSQL choose between a custom plan per call and a cached generic
-- one. For statements over the partitioned idem.outbox with array or LIMIT parameters it kept
-- re-planning (custom plans over every day partition, 5 to 10 ms a call), and the claim's
-- generic plan joined the claimed rows to a sequential scan of every partition. Once a plan's
-- estimated cost passed jit_above_cost, PostgreSQL also JIT-compiled it on every call (about
-- 70 ms). Together that was half of the relay's database time per batch.
--
-- Version 5 splits the claim in two statements, each with a plan that does not depend on the
-- parameters: the locking scan collects the ids to claim, and the update addresses them by
-- primary key (id = ANY). The three functions keep their signatures and results; each runs
-- with plan_cache_mode = force_generic_plan and jit = off. No table changes.

-- The relay's claim (same contract as version 3): up to p_limit pending rows whose claim is
-- free or whose lease ran out, locked with SKIP LOCKED so relays never wait for each other, in
-- id order. A row with an ordering key is taken only if every earlier pending row of its key is
-- taken with it, so a key's events are held by one relay at a time and go out in order. Sets
-- the lease, counts the attempt and stamps the first attempt; returns how long ago that first
-- attempt was.
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
  -- 1. Lock the candidates and keep those whose key has no earlier pending row outside them.
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
  -- 2. Claim them by primary key (ids come from one sequence: unique across days). They are
  -- locked by this transaction since step 1, so nothing changed them meanwhile.
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

-- Marks claimed rows published with the stream sequence of their PubAck. Only pending rows
-- change; returns how many did.
CREATE OR REPLACE FUNCTION idem.outbox_mark_published(p_ids bigint[], p_days integer[],
                                                      p_seqs bigint[], p_dups boolean[])
RETURNS integer LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
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

-- Gives claims back at once (a publish failed for a transient reason) instead of waiting for
-- the lease; only the relay's own claims. The error is kept for operators.
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
