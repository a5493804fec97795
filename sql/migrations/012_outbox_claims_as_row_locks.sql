-- emit layer: the relay holds its claim as row locks (idem.outbox_lock, outbox_settle, outbox_attempts).
--
-- Schema version 12: the relay holds its claim as row locks in an open transaction instead of
-- writing a lease into every row.
--
-- Up to version 11 a relay wrote each row twice: the claim (lease, attempt count, first
-- attempt) and the mark (published, stream sequence). The claim's write was about half of
-- PostgreSQL's CPU per published event. From this version a relay locks a batch with
-- idem.outbox_lock (FOR UPDATE SKIP LOCKED) in a transaction it keeps open while it publishes,
-- and marks the rows and commits in that same transaction (idem.outbox_settle). The lock is
-- the claim: other relays skip the rows; a relay that dies drops its connection and the rows
-- are free at once; a relay that hangs is cut off by idle_in_transaction_session_timeout, which
-- the relay sets to its claim lease.
--
-- What the per-row write also gave, the time of a row's first publish attempt (the duplicate
-- window accounting needs it to survive a relay killed between publish and mark), is now one
-- row per batch in idem.outbox_attempts: committed on another connection before the batch is
-- published, deleted by the settle that marks it. A record left by a relay that died stays
-- until none of its rows is pending (idem.outbox_forget_attempts, run by the relay's sweep), and
-- the next lock of those rows reads their first attempt from it. A publish that fails is
-- stamped on its rows (first_attempt_at, attempts, error) by the settle.
--
-- Version 3 to 11's claim, mark and release keep working, so relays of both versions may run
-- against one outbox during an upgrade: each skips the rows the other holds (a lease or a lock).

-- One row per batch being published (or left by a relay that died publishing it).
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

-- Locks up to p_limit pending rows with ids above p_after in the caller's transaction,
-- skipping rows another transaction holds and rows under a lease of an older relay, in id
-- order. A row with an ordering key is returned only if every earlier pending row of its key
-- is locked with it (rows left out stay locked until the transaction ends, and are then free
-- again). Returns how long ago each row's first publish attempt was (0 if none) and its
-- attempts including this one.
--
-- p_after lets a relay that already holds batches start past them: stepping over a row that
-- another transaction has locked costs about as much as locking one. A relay must not only
-- ever look past its last id (ids are not committed in order: a row may appear below it
-- later), so it passes 0 regularly.
CREATE OR REPLACE FUNCTION idem.outbox_lock(p_limit integer, p_after bigint DEFAULT 0)
RETURNS TABLE (id bigint, day integer, event_id text, subject text, payload bytea,
               headers jsonb, first_attempt_age_ms bigint, attempts integer)
LANGUAGE sql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
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
   ORDER BY c.id
$$;

-- Notes that the batch p_batch (rows p_ids, ascending) is about to be published. Called on
-- a connection of its own, outside the transaction holding the rows, and committed before the
-- publish.
CREATE OR REPLACE FUNCTION idem.outbox_attempt(p_batch text, p_ids bigint[])
RETURNS void LANGUAGE sql VOLATILE AS $$
  INSERT INTO idem.outbox_attempts (batch, first_id, last_id, ids)
  VALUES (p_batch, p_ids[1], p_ids[cardinality(p_ids)], p_ids)
  ON CONFLICT (batch) DO NOTHING
$$;

-- In the transaction that locked the rows: marks the published ones with their stream
-- sequence, stamps the ones whose publish failed so that the next lock knows, both with the
-- attempt (count, first attempt time; the rows are written anyway), and forgets the batch's
-- attempt record. Returns how many rows it marked.
CREATE OR REPLACE FUNCTION idem.outbox_settle(p_batch text, p_ids bigint[], p_days integer[],
                                              p_seqs bigint[], p_dups boolean[],
                                              p_failed_ids bigint[], p_failed_days integer[],
                                              p_error text)
RETURNS integer LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_count integer := 0;
  v_at    timestamptz;
BEGIN
  DELETE FROM idem.outbox_attempts a WHERE a.batch = p_batch RETURNING a.at INTO v_at;
  IF cardinality(p_ids) > 0 THEN
    -- A published row's attempts and first attempt count those of relays that died publishing
    -- it (their records), as well as its own.
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
     WHERE o.id = u.id AND o.day = u.day AND o.state = 0;
    GET DIAGNOSTICS v_count = ROW_COUNT;
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

-- Parks a row the relay cannot publish (kept, with the reason, and not retried), counting the
-- attempt that found it bad. A row claimed by a relay of version 11 or older has claim_until
-- set and its attempt already counted by that claim.
CREATE OR REPLACE FUNCTION idem.outbox_park(p_id bigint, p_day integer, p_error text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  UPDATE idem.outbox o
     SET state = 2, error = p_error, claim_until = NULL,
         attempts = o.attempts + CASE WHEN o.claim_until IS NULL THEN 1 ELSE 0 END
   WHERE o.id = p_id AND o.day = p_day AND o.state = 0;
  RETURN FOUND;
END $$;

-- Deletes the attempt records older than p_older_than_ms none of whose rows is still pending
-- (left by relays that died between publish and settle, once their rows went out again).
-- Returns how many it deleted.
CREATE OR REPLACE FUNCTION idem.outbox_forget_attempts(p_older_than_ms bigint)
RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_count integer;
BEGIN
  DELETE FROM idem.outbox_attempts a
   WHERE a.at < clock_timestamp() - p_older_than_ms * interval '1 millisecond'
     AND NOT EXISTS (SELECT 1 FROM idem.outbox o WHERE o.id = ANY (a.ids) AND o.state = 0);
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END $$;
