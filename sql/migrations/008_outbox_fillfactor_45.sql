-- emit layer: room on each outbox page for the claim to be a HOT update.
--
-- Schema version 8: the outbox's day partitions keep room on every page for the relay's claim
-- to be a HOT update. Functions and rows are otherwise unchanged.
--
-- The claim rewrites every row it takes (the lease, the attempt count, the first attempt), and
-- takes all the rows of a page at once: in id order a batch covers whole pages. A HOT update
-- (no new index entries, the old version pruned in place) needs the new version on the same
-- page, so a page must keep as much free space as its rows take. With version 3's fillfactor
-- of 80 about three claims in four were not HOT: each then wrote two index entries (the
-- primary key and the pending-rows index) and left dead entries that every later claim's scan
-- stepped over, the largest part of PostgreSQL's CPU time per published event. At 45 every
-- claim is HOT. The cost is disk: a partition's heap takes about twice the space (published
-- rows are still reclaimed by dropping whole days). The mark, which takes the row out of the
-- pending-rows index, cannot be HOT whatever the room.
--
-- New partitions are created at fillfactor 45; existing ones are altered, which applies to the
-- rows inserted from then on (rows already written stay where they are).

CREATE OR REPLACE FUNCTION idem.outbox_ensure_partition(p_day integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_name text := 'outbox_p' || to_char(date '1970-01-01' + p_day, 'YYYYMMDD');
BEGIN
  IF to_regclass('idem.' || v_name) IS NOT NULL THEN RETURN false; END IF;
  PERFORM pg_advisory_xact_lock(6906989, 20);  -- "idm", the outbox partition lock
  IF to_regclass('idem.' || v_name) IS NOT NULL THEN RETURN false; END IF;
  -- fillfactor 45: room on each page for the claim's update of every row on it to stay a HOT
  -- update (schema version 8).
  EXECUTE format('CREATE TABLE idem.%I (LIKE idem.outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS) '
                 'WITH (fillfactor = 45)', v_name);
  EXECUTE format('ALTER TABLE idem.outbox ATTACH PARTITION idem.%I FOR VALUES FROM (%s) TO (%s)',
                 v_name, p_day, p_day + 1);
  RETURN true;
END $$;

DO $$
DECLARE
  v_part regclass;
BEGIN
  FOR v_part IN SELECT i.inhrelid::regclass FROM pg_inherits i
                 WHERE i.inhparent = 'idem.outbox'::regclass LOOP
    EXECUTE format('ALTER TABLE %s SET (fillfactor = 45)', v_part);
  END LOOP;
END $$;
