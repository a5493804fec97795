-- emit layer: a floor below which no outbox row can be pending (idem.outbox_last_id, idem.outbox_floor_xid, idem.outbox_floor, idem.outbox_stats(from)).
--
-- Schema version 16: a floor below which no outbox row can be pending, so that the relay's
-- scans for pending rows start there instead of at the first entry of the pending-rows index.
--
-- The settle takes a published row out of the partial index of pending rows, but its old entry
-- stays in the index until VACUUM removes it, and autovacuum comes rarely to a big partition (at
-- a fifth of its rows changed, by default; and PostgreSQL 15 may skip the index pass when few
-- heap pages hold dead rows). A scan that starts at the first pending row steps over every such
-- entry: with 299,000 rows published in the partition since its last VACUUM, locking one row
-- cost 2.2 ms from the first entry against 0.72 ms from the floor, and 4.6 against 0.67 ms
-- with 999,000 (bench/outbox-floor-bench.sh; docs/emit.md, "Measured"). A relay keeping up
-- with a low rate locks from the start at every batch, and a busy one at every eighth; the
-- gauges count from the start every second.
--
-- Why a floor is safe. Ids come from idem.outbox_id_seq (CACHE 1), and idem.outbox_enqueue
-- writes (so takes its transaction id) before it draws one. Read the sequence's last value L,
-- then, in a later transaction, take a transaction id X of one's own (pg_current_xact_id():
-- ids are handed out in order, and a snapshot's xmax is no substitute, being one past the
-- last transaction to finish, not the last to begin). Every transaction that drew an id up to
-- L had its transaction id before X was taken, so it is below X. Once no transaction below X
-- is running (the snapshot's xmin has passed X), every row with an id up to L is committed
-- or gone for good, and no row can ever again become pending below min(L + 1, the lowest
-- pending id). A row committed late, below ids already published, keeps the floor at or below
-- it until it is published: the floor waits for its transaction. The scan for that minimum
-- starts at the previous floor, so it is cheap too.

-- The first half of a floor: the highest id drawn so far. Read it, then take a transaction id
-- with idem.outbox_floor_xid() in a later transaction, and pass both to idem.outbox_floor
-- later.
CREATE OR REPLACE FUNCTION idem.outbox_last_id()
RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END FROM idem.outbox_id_seq s
$$;

-- A transaction id of the caller's own (pg_current_xact_id()), for the mark. Its commit does
-- not wait for the WAL to reach the disk: a relay takes one every two seconds on its main
-- connection, whose loop should not wait for a disk flush, and a lost commit (the server
-- crashed) only ends the transaction as aborted; the relay drops its mark with the session.
CREATE OR REPLACE FUNCTION idem.outbox_floor_xid()
RETURNS xid8 LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);  -- until this transaction ends
  RETURN pg_current_xact_id();
END $$;

-- The lowest id a pending row can have, from a mark (p_last_id, then p_xid_bound, read as
-- above) and the floor known before it (0 if none): NULL while a transaction up to
-- p_xid_bound still runs (it may yet commit a row with a lower id), or when the sequence
-- hands out ids in blocks (a cache above 1), where the argument does not hold.
CREATE OR REPLACE FUNCTION idem.outbox_floor(p_last_id bigint, p_xid_bound xid8, p_from bigint)
RETURNS bigint LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_lowest bigint;
BEGIN
  IF pg_snapshot_xmin(pg_current_snapshot()) <= p_xid_bound THEN RETURN NULL; END IF;
  IF (SELECT s.seqcache FROM pg_sequence s WHERE s.seqrelid = 'idem.outbox_id_seq'::regclass) <> 1 THEN
    RETURN NULL;
  END IF;
  SELECT o.id INTO v_lowest FROM idem.outbox o
   WHERE o.state = 0 AND o.id >= p_from ORDER BY o.id LIMIT 1;
  RETURN least(p_last_id + 1, coalesce(v_lowest, p_last_id + 1));
END $$;

-- The relay's gauges from a floor (version 14's idem.outbox_stats counts from the first
-- entry of the index): age in seconds of the oldest pending row (0 when none), pending and
-- parked counts. On the generic plan: with a floor as its argument PostgreSQL kept making a
-- custom plan over every day partition at each call (5.3 ms a call, of which 4.7 planning,
-- against 0.55 ms on the generic plan; 31 partitions, 1,000 pending rows).
CREATE OR REPLACE FUNCTION idem.outbox_stats(p_from bigint, OUT lag_seconds double precision,
                                             OUT pending bigint, OUT parked bigint)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
BEGIN
  SELECT coalesce((SELECT extract(epoch FROM clock_timestamp() - o.enqueued_at)
                     FROM idem.outbox o WHERE o.state = 0 AND o.id >= p_from
                    ORDER BY o.id LIMIT 1), 0)::float8,
         (SELECT count(*) FROM idem.outbox o WHERE o.state = 0 AND o.id >= p_from),
         (SELECT count(*) FROM idem.outbox o WHERE o.state = 2)
    INTO lag_seconds, pending, parked;
END $$;
