-- emit layer: the relay's settle marks a batch one day partition at a time (idem.outbox_settle).
--
-- Schema version 15: idem.outbox_settle marks a batch one day partition at a time.
--
-- Version 12's settle joined the batch's ids to idem.outbox on (id, day) with the day a column
-- of the batch: its kept generic plan looked each row up through an Append of every day
-- partition and pruned it again for every row (a nested loop's rescan). With the 31
-- partitions a 30-day retention keeps, that pruning was about a tenth of the settle's time:
-- 12.85 against 11.51 ms per 1,000 rows, alternating in one session (docs/emit.md,
-- "Measured"). This version loops over the batch's distinct days (one, or two around midnight)
-- and updates each with the day a scalar: the plan's partitions are pruned once, when it
-- starts, and each row is one index lookup in its partition. A statement built for the
-- partition by name (EXECUTE) measured no better, and would be planned at every call.
--
-- Same signature, same effects, same result; the failed rows' stamp (rare) is unchanged.

-- The contract is version 12's (012_outbox_claims_as_row_locks.sql): in the transaction that locked the
-- rows, marks the published ones with their stream sequence, stamps the failed ones, counts
-- the attempt on both, forgets the batch's attempt record, and returns how many it marked.
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
BEGIN
  DELETE FROM idem.outbox_attempts a WHERE a.batch = p_batch RETURNING a.at INTO v_at;
  IF cardinality(p_ids) > 0 THEN
    FOR v_day IN SELECT DISTINCT d FROM unnest(p_days) AS d LOOP
      -- A published row's attempts and first attempt count those of relays that died
      -- publishing it (their records), as well as its own.
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
