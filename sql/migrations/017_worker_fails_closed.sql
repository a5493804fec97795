-- worker layer: building blocks fail closed on NULLs and bound their inputs; the inbox sweep in steps (idem.inbox_sweep_step); balances derived by a ledger trigger.
--
-- Schema version 17: the worker layer's building blocks fail closed on NULLs, bound what they
-- accept, and the inbox sweep works in small steps. docs/worker.md states every limit.
--
-- Three-valued logic. A PL/pgSQL `IF c THEN` skips its branch when c is NULL, so a guard
-- written `IF NOT (x = ANY (a)) THEN refuse` lets everything through when `a` holds a NULL, and
-- `greatest(1, NULL)` is 1. Version 17 rewrites every such guard found in the functions idem
-- ships (the list is in docs/worker.md, "Limits"): NULL arguments are SQLSTATE 22023, and the
-- comparisons left cannot see a NULL.
--
-- Limits. Retention at most 366 days, the sweep's horizon 0 to 366 days and its `p_now` within
-- 3,660 days of the server's clock: so every day the inbox can make a partition for is a
-- four-digit year, `idem.inbox_pYYYYMMDD`, and about 1,100 day partitions at most exist. (The
-- partitioned parent takes one lock per partition for a query that cannot prune; PostgreSQL's
-- default lock table holds 6,400. A 10-year retention would need 7,300 partitions.) Ids that
-- go into an index (consumer, message id, account, txn id, kind, entity id) are at most 1,024
-- bytes: two of them fit a B-tree entry (2,704 bytes) with room to spare. Intent ids follow the
-- rule for keys (1 to 255 visible ASCII characters); leases and keeps are at most 3,650 days,
-- as the gateway's durations are.
--
-- The sweep in steps. idem.inbox_sweep_step does a bounded amount of work in the caller's
-- transaction -- it drops at most 4 expired partitions (about 1 ms each), or else creates one
-- missing partition -- under lock_timeout 20 ms, and says whether anything is left.
-- idem.inbox_sweep_all (a procedure) and the C++ callers run steps, each its own transaction,
-- until done, so no lock is held longer than a step. A claim on partitions that exist takes no
-- lock a step holds; one that must create a partition, or touches idem.inbox itself, waits for
-- the step in progress at most. A partition whose lock is busy is left for the next run
-- (counted in partitions_busy).
--
-- The generated dispatch (versions 4 to 7) covers only the day partitions of the next
-- kInboxDispatchDays days (today included): every day a claim under the default 30-day
-- retention can touch. Its size, its rebuild and each session's recompile after a rebuild no
-- longer grow with the longest retention (with 1,100 partitions: 380 ms to rebuild, 186 ms for
-- each session's next claim). A claim under a longer retention reaches a day beyond it by name
-- (idem.inbox_probe), as it reached any day unknown to the dispatch before. Partitions created
-- beyond the window need no rebuild; the sweep rebuilds when the window has moved (a new day).
--
-- Ledger. TRUNCATE is refused like UPDATE and DELETE. Balances are maintained by a trigger on
-- idem.ledger (every inserted entry, whoever inserts it), and a trigger on idem.balances
-- refuses any other write: the balance is always the sum of the entries.

-- ---- inbox ------------------------------------------------------------------------------------

-- NULL in, NULL out (greatest(1, NULL) would answer 1).
CREATE OR REPLACE FUNCTION idem.inbox_days(keep interval) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
BEGIN
  RETURN greatest(1, ceil(extract(epoch FROM keep) / 86400.0))::integer;
END $$;

CREATE OR REPLACE FUNCTION idem.inbox_expiry_day(message_id text, keep interval, at timestamptz)
RETURNS date LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
  k    integer := greatest(1, ceil(extract(epoch FROM keep) / 86400.0))::integer;
  base integer := floor(extract(epoch FROM at) / 86400)::integer + k;
  slot integer := ((('x' || substr(md5(message_id), 1, 8))::bit(32)::integer % k) + k) % k;
BEGIN
  RETURN date '1970-01-01' + (base + ((slot - base) % k + k) % k);
END $$;

-- Existing rows keep their retention (a longer one set before this version still works); new
-- and changed ones are bounded.
DO $$
BEGIN
  ALTER TABLE idem.inbox_consumers ADD CONSTRAINT inbox_consumers_keep_bounded
    CHECK (keep <= interval '366 days') NOT VALID;
EXCEPTION WHEN duplicate_object THEN
  NULL;
END $$;

CREATE OR REPLACE FUNCTION idem.inbox_retention(consumer text, keep interval) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
  IF coalesce(inbox_retention.consumer, '') = '' OR octet_length(inbox_retention.consumer) > 1024 THEN
    RAISE EXCEPTION 'idem.inbox_retention: consumer must be 1 to 1024 bytes'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF inbox_retention.keep IS NULL OR inbox_retention.keep < interval '0'
     OR inbox_retention.keep > interval '366 days' THEN
    RAISE EXCEPTION 'idem.inbox_retention: keep must be 0 to 366 days, not %',
      coalesce(inbox_retention.keep::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  INSERT INTO idem.inbox_consumers AS c (consumer, keep, previous_keep, changed_at)
  VALUES (inbox_retention.consumer, inbox_retention.keep, interval '30 days', now())
  ON CONFLICT (consumer) DO UPDATE
    SET keep = EXCLUDED.keep, previous_keep = c.keep, changed_at = now()
    WHERE c.keep IS DISTINCT FROM EXCLUDED.keep;
END $$;

-- The day the generated dispatch was last built for (its window starts there).
CREATE TABLE IF NOT EXISTS idem.inbox_dispatch_window (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  built_on date    NOT NULL
);

-- Version 7's generator, for the partitions of today through today + 69 only (the window; a
-- claim under the default retention touches days today to today + 61), and with the id limits
-- in the fast path's expression: an over-long id goes to idem.inbox_claim_full, which raises.
CREATE OR REPLACE FUNCTION idem.inbox_dispatch_build() RETURNS void
LANGUAGE plpgsql VOLATILE AS $g$
DECLARE
  v_today date := (now() AT TIME ZONE 'UTC')::date;
  v_days  date[];
  v_pairs date[];  -- the days whose partition of day - 30 exists too
BEGIN
  PERFORM pg_advisory_xact_lock(6906989, 3);  -- kLockNamespace, kInboxPartitionLock
  -- (MATERIALIZED: names are parsed only for the inbox's partitions, never for another
  -- relation the planner might otherwise evaluate the filter on first.)
  WITH parts AS MATERIALIZED (
    SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'idem.inbox'::regclass AND c.relname ~ '^inbox_p[0-9]{8}$'
  ), days AS (
    SELECT to_date(substring(p.relname FROM 8), 'YYYYMMDD') AS d FROM parts p
  )
  SELECT coalesce(array_agg(d ORDER BY d), '{}') INTO v_days
    FROM days WHERE d >= v_today AND d < v_today + 70;
  v_pairs := ARRAY(SELECT d FROM unnest(v_days) d WHERE d - 30 = ANY (v_days) ORDER BY d);
  EXECUTE format($f$CREATE OR REPLACE FUNCTION idem.inbox_at(p_insert boolean, p_day date,
                                                   p_consumer text, p_message_id text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $b$
-- Generated by idem.inbox_dispatch_build() for %s day partitions; do not edit.
BEGIN
%s
END $b$$f$, cardinality(v_days), idem.inbox_dispatch_src(v_days, 1, cardinality(v_days)));
  EXECUTE format($f$CREATE OR REPLACE FUNCTION idem.inbox_claim(consumer text, message_id text)
RETURNS boolean LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $b$
-- Generated by idem.inbox_dispatch_build() for %s day partitions; do not edit.
#variable_conflict use_column
DECLARE
  v_day date;
BEGIN
  -- One expression (schema version 7; the id limits since version 17): the arguments and
  -- the isolation level are usable, then the advisory lock of idem.inbox_claim_full, then the
  -- expiry day idem.inbox_expiry_day gives for a 30-day retention. NULL when the general path
  -- must answer (or raise).
  v_day := CASE
    WHEN inbox_claim.consumer <> '' AND inbox_claim.message_id <> ''
         AND octet_length(inbox_claim.consumer) <= 1024
         AND octet_length(inbox_claim.message_id) <= 1024
         AND current_setting('transaction_isolation') <> 'repeatable read'
         AND pg_advisory_xact_lock(hashtextextended(
               length(inbox_claim.consumer) || ':' || inbox_claim.consumer
               || inbox_claim.message_id, 6906989)) IS NOT NULL
    THEN (now() AT TIME ZONE 'UTC')::date + 30
         + ((('x' || substr(md5(inbox_claim.message_id), 1, 8))::bit(32)::integer %% 30 + 60
             - ((now() AT TIME ZONE 'UTC')::date - date '1970-01-01') %% 30) %% 30)
  END;
  -- The day's statement inserts only when the pair is in neither partition and the
  -- consumer's retention is the default 30 days with no recent change (no row in
  -- idem.inbox_consumers, or one saying so). Anything else: the general path.
%s
  RETURN idem.inbox_claim_full(inbox_claim.consumer, inbox_claim.message_id);
END $b$$f$, cardinality(v_days), idem.inbox_claim_src(v_pairs, 1, cardinality(v_pairs)));
  INSERT INTO idem.inbox_dispatch_window AS w (only_row, built_on) VALUES (true, v_today)
  ON CONFLICT (only_row) DO UPDATE SET built_on = EXCLUDED.built_on
    WHERE w.built_on IS DISTINCT FROM EXCLUDED.built_on;
END $g$;

-- Creates the partition of day p_day unless it exists, without rebuilding the dispatch; returns
-- whether it created it. Days outside the years 1970 to 9999 are refused, so every name is
-- inbox_p followed by 8 digits.
CREATE OR REPLACE FUNCTION idem.inbox_create_partition(p_day date) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_name text;
BEGIN
  IF p_day IS NULL OR p_day < date '1970-01-01' OR p_day > date '9999-12-31' THEN
    RAISE EXCEPTION 'idem.inbox: no partition for day %: days are 1970-01-01 to 9999-12-31',
      coalesce(p_day::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
  END IF;
  v_name := 'inbox_p' || to_char(p_day, 'YYYYMMDD');
  IF to_regclass('idem.' || v_name) IS NOT NULL THEN RETURN false; END IF;
  PERFORM pg_advisory_xact_lock(6906989, 3);  -- kLockNamespace, kInboxPartitionLock
  IF to_regclass('idem.' || v_name) IS NOT NULL THEN RETURN false; END IF;
  BEGIN
    EXECUTE format('CREATE TABLE idem.%I (LIKE idem.inbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                   v_name);
    EXECUTE format('ALTER TABLE idem.inbox ATTACH PARTITION idem.%I FOR VALUES FROM (%L) TO (%L)',
                   v_name, p_day, p_day + 1);
  EXCEPTION WHEN duplicate_table THEN
    RETURN false;
  END;
  RETURN true;
END $$;

-- As in version 5 (creates p_day, and p_day - 30 when a 30-day claim made today can expire on
-- p_day), rebuilding the dispatch only when it created a day inside the dispatch's window.
CREATE OR REPLACE FUNCTION idem.inbox_ensure_partition(p_day date) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_today   date := (now() AT TIME ZONE 'UTC')::date;
  v_pair    boolean := p_day - 30 BETWEEN v_today AND v_today + 31;
  v_created boolean := false;
  v_rebuild boolean := false;
  v_day     date;
BEGIN
  IF p_day IS NULL THEN
    RAISE EXCEPTION 'idem.inbox_ensure_partition: p_day is NULL'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  FOREACH v_day IN ARRAY ARRAY[p_day, p_day - 30] LOOP
    CONTINUE WHEN v_day <> p_day AND NOT v_pair;
    IF idem.inbox_create_partition(v_day) THEN
      IF v_day = p_day THEN v_created := true; END IF;
      IF v_day >= v_today AND v_day < v_today + 70 THEN v_rebuild := true; END IF;
    END IF;
  END LOOP;
  IF v_rebuild THEN PERFORM idem.inbox_dispatch_build(); END IF;
  RETURN v_created;
END $$;

-- Version 4's general path with the id limits (raised here for the fast path too).
CREATE OR REPLACE FUNCTION idem.inbox_claim_full(consumer text, message_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
  v_keep    interval := interval '30 days';
  v_prev    interval;
  v_changed timestamptz;
  v_day     date;
  v_old     date;
  v_prev1   date;
  v_prev0   date;
  v_claimed boolean;
BEGIN
  IF coalesce(inbox_claim_full.consumer, '') = ''
     OR coalesce(inbox_claim_full.message_id, '') = '' THEN
    RAISE EXCEPTION 'idem.inbox_claim: consumer and message_id must be non-empty'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF octet_length(inbox_claim_full.consumer) > 1024
     OR octet_length(inbox_claim_full.message_id) > 1024 THEN
    RAISE EXCEPTION 'idem.inbox_claim: consumer and message_id must be at most 1024 bytes (got % and %)',
      octet_length(inbox_claim_full.consumer), octet_length(inbox_claim_full.message_id)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF current_setting('transaction_isolation') = 'repeatable read' THEN
    RAISE EXCEPTION 'idem.inbox_claim needs READ COMMITTED or SERIALIZABLE, not REPEATABLE READ'
      USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended(
    length(inbox_claim_full.consumer) || ':' || inbox_claim_full.consumer
    || inbox_claim_full.message_id, 6906989));
  SELECT c.keep, c.previous_keep, c.changed_at INTO v_keep, v_prev, v_changed
    FROM idem.inbox_consumers c WHERE c.consumer = inbox_claim_full.consumer;
  IF NOT FOUND THEN v_keep := interval '30 days'; END IF;
  v_day := idem.inbox_expiry_day(inbox_claim_full.message_id, v_keep, now());
  v_old := v_day - idem.inbox_days(v_keep);
  v_claimed := idem.inbox_at(false, v_day, inbox_claim_full.consumer, inbox_claim_full.message_id);
  IF v_claimed IS NULL THEN
    v_claimed := idem.inbox_probe(v_day, inbox_claim_full.consumer, inbox_claim_full.message_id);
  END IF;
  IF v_claimed IS NOT FALSE THEN RETURN false; END IF;
  v_claimed := idem.inbox_at(false, v_old, inbox_claim_full.consumer, inbox_claim_full.message_id);
  IF v_claimed IS NULL THEN
    v_claimed := idem.inbox_probe(v_old, inbox_claim_full.consumer, inbox_claim_full.message_id);
  END IF;
  IF v_claimed IS NOT FALSE THEN RETURN false; END IF;
  -- Claims made under the previous retention sit in its slots until they expire.
  IF v_prev IS NOT NULL AND now() < v_changed + 2 * v_prev + interval '2 days' THEN
    v_prev1 := idem.inbox_expiry_day(inbox_claim_full.message_id, v_prev, now());
    v_prev0 := v_prev1 - idem.inbox_days(v_prev);
    IF (v_prev1 NOT IN (v_day, v_old)
        AND idem.inbox_probe(v_prev1, inbox_claim_full.consumer, inbox_claim_full.message_id))
       OR (v_prev0 NOT IN (v_day, v_old)
           AND idem.inbox_probe(v_prev0, inbox_claim_full.consumer,
                                inbox_claim_full.message_id)) THEN
      RETURN false;
    END IF;
  END IF;
  v_claimed := idem.inbox_at(true, v_day, inbox_claim_full.consumer, inbox_claim_full.message_id);
  IF v_claimed IS NOT NULL THEN RETURN v_claimed; END IF;
  -- First claim of a day the dispatch does not know: create it, then insert via the parent.
  PERFORM idem.inbox_ensure_partition(v_day);
  INSERT INTO idem.inbox (consumer, message_id, expires_on)
  VALUES (inbox_claim_full.consumer, inbox_claim_full.message_id, v_day)
  ON CONFLICT DO NOTHING;
  RETURN FOUND;
END $$;

-- One bounded step of the sweep, in the caller's transaction:
--   1. drops up to 4 partitions whose day ended at or before p_now's UTC day (all their claims
--      are past retention), oldest first; claims_dropped counts their rows;
--   2. if it dropped none, creates one of the partitions new claims will need over the next
--      p_horizon_days days (for every retention in use: days K to 2K + horizon ahead, and the
--      fast path's older partitions), the nearest first;
--   3. rebuilds the dispatch when the window has moved (before any DROP, which locks
--      idem.inbox until the transaction ends), or when it created or dropped a day inside it.
-- done: the step found nothing it could do (call again until then). A partition whose lock
-- was not granted within lock_timeout (20 ms: a DROP queued behind a long transaction would
-- stall every claim queued behind it) is skipped and counted in partitions_busy; the next run
-- retries it. A partition's day comes from its name (inbox_pYYYYMMDD) or, for any other name,
-- from its bounds.
CREATE OR REPLACE FUNCTION idem.inbox_sweep_step(p_now timestamptz DEFAULT now(),
                                                 p_horizon_days integer DEFAULT 2,
                                                 OUT claims_dropped bigint,
                                                 OUT partitions_dropped integer,
                                                 OUT partitions_created integer,
                                                 OUT partitions_busy integer,
                                                 OUT done boolean)
LANGUAGE plpgsql VOLATILE SET datestyle = 'ISO, YMD' AS $$
DECLARE
  v_today    date;
  v_real     date := (now() AT TIME ZONE 'UTC')::date;
  v_part     record;
  v_rows     bigint;
  v_day      date;
  v_parts    regclass[] := '{}';
  v_counts   bigint[] := '{}';
  v_days     date[] := '{}';
  v_existing date[];
  v_rebuild  boolean := false;
  v_built_on date;
BEGIN
  IF p_now IS NULL OR p_now < now() - interval '3660 days' OR p_now > now() + interval '3660 days' THEN
    RAISE EXCEPTION 'idem.inbox_sweep: p_now must be within 3660 days of now(), not %',
      coalesce(p_now::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_horizon_days IS NULL OR p_horizon_days < 0 OR p_horizon_days > 366 THEN
    RAISE EXCEPTION 'idem.inbox_sweep: p_horizon_days must be 0 to 366, not %',
      coalesce(p_horizon_days::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
  END IF;
  v_today := (p_now AT TIME ZONE 'UTC')::date;
  claims_dropped := 0;
  partitions_dropped := 0;
  partitions_created := 0;
  partitions_busy := 0;
  PERFORM set_config('lock_timeout', '20ms', true);
  -- 1. Expired partitions, oldest first, each counted before any is dropped.
  FOR v_part IN
    WITH parts AS MATERIALIZED (  -- the inbox's partitions only (see idem.inbox_dispatch_build)
      SELECT c.oid, c.relname, c.relpartbound FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
       WHERE i.inhparent = 'idem.inbox'::regclass
    )
    SELECT p.rel, p.last_day FROM (
      SELECT c.oid::regclass AS rel,
             CASE WHEN c.relname ~ '^inbox_p[0-9]{8}$'
                  THEN to_date(substring(c.relname FROM 8), 'YYYYMMDD')
                  ELSE (regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                     'TO \(''([0-9]{4,}-[0-9]{2}-[0-9]{2})''\)'))[1]::date - 1
             END AS last_day
        FROM parts c) p
     WHERE p.last_day < v_today
     ORDER BY p.last_day LIMIT 4
  LOOP
    BEGIN
      EXECUTE format('SELECT count(*) FROM %s', v_part.rel) INTO v_rows;
      v_parts := v_parts || v_part.rel;
      v_counts := v_counts || v_rows;
      v_days := v_days || v_part.last_day;
    EXCEPTION WHEN lock_not_available THEN
      partitions_busy := partitions_busy + 1;
    END;
  END LOOP;
  -- 3, first half: a moved window is rebuilt before the parent is locked.
  SELECT w.built_on INTO v_built_on FROM idem.inbox_dispatch_window w;
  IF v_built_on IS DISTINCT FROM v_real THEN
    PERFORM idem.inbox_dispatch_build();
  END IF;
  FOR i IN 1 .. cardinality(v_parts) LOOP
    BEGIN
      EXECUTE format('DROP TABLE %s', v_parts[i]);
      claims_dropped := claims_dropped + v_counts[i];
      partitions_dropped := partitions_dropped + 1;
      IF v_days[i] >= v_real THEN v_rebuild := true; END IF;  -- only with p_now ahead of now()
    EXCEPTION WHEN lock_not_available THEN
      partitions_busy := partitions_busy + 1;
      EXIT;  -- the parent's lock is busy: the others would wait just the same
    END;
  END LOOP;
  -- 2. The nearest missing partition.
  IF partitions_dropped = 0 THEN
    SELECT coalesce(array_agg(to_date(substring(c.relname FROM 8), 'YYYYMMDD')), '{}')
      INTO v_existing
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'idem.inbox'::regclass AND c.relname ~ '^inbox_p[0-9]{8}$';
    WITH keeps AS (
      SELECT idem.inbox_days(interval '30 days') AS k
      UNION SELECT idem.inbox_days(c.keep) FROM idem.inbox_consumers c
    ), days AS (
      SELECT v_today + g AS d FROM keeps k CROSS JOIN generate_series(k.k, 2 * k.k + p_horizon_days) g
    ), wanted AS (
      SELECT d FROM days
      UNION SELECT d - 30 FROM days
             WHERE d - 30 BETWEEN v_real AND v_real + 31 AND d - 30 >= v_today
    )
    SELECT w.d INTO v_day FROM wanted w WHERE w.d <> ALL (v_existing) ORDER BY w.d LIMIT 1;
    IF v_day IS NOT NULL THEN
      BEGIN
        IF idem.inbox_create_partition(v_day) THEN
          partitions_created := 1;
          IF v_day >= v_real AND v_day < v_real + 70 THEN v_rebuild := true; END IF;
        END IF;
      EXCEPTION WHEN lock_not_available THEN
        partitions_busy := partitions_busy + 1;
      END;
    END IF;
  END IF;
  -- 3, second half: the dispatch without the dropped days, with the created one.
  IF v_rebuild THEN PERFORM idem.inbox_dispatch_build(); END IF;
  done := partitions_dropped = 0 AND partitions_created = 0;
END $$;

-- One step (idem.inbox_sweep_step), for callers of earlier versions: returns the claims it
-- dropped. Run idem.inbox_sweep_all, or the step until done, to finish a sweep.
CREATE OR REPLACE FUNCTION idem.inbox_sweep(p_now timestamptz DEFAULT now(),
                                            p_horizon_days integer DEFAULT 2)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT s.claims_dropped FROM idem.inbox_sweep_step(p_now, p_horizon_days) s
$$;

-- The whole sweep, one step per transaction (CALL it outside a transaction block: from psql,
-- cron or pg_cron). Reports what it did in a NOTICE.
CREATE OR REPLACE PROCEDURE idem.inbox_sweep_all(p_now timestamptz DEFAULT now(),
                                                 p_horizon_days integer DEFAULT 2)
LANGUAGE plpgsql AS $$
DECLARE
  s record;
  v_claims  bigint := 0;
  v_dropped bigint := 0;
  v_created bigint := 0;
  v_busy    bigint := 0;
BEGIN
  LOOP
    SELECT * INTO s FROM idem.inbox_sweep_step(p_now, p_horizon_days);
    v_claims := v_claims + s.claims_dropped;
    v_dropped := v_dropped + s.partitions_dropped;
    v_created := v_created + s.partitions_created;
    v_busy := v_busy + s.partitions_busy;
    COMMIT;
    EXIT WHEN s.done;
  END LOOP;
  RAISE NOTICE 'idem.inbox_sweep_all: dropped % claims in % partitions, created % partitions, % busy (left for the next run)',
    v_claims, v_dropped, v_created, v_busy;
END $$;

-- ---- ledger -----------------------------------------------------------------------------------

-- TRUNCATE is refused like UPDATE and DELETE (idem.ledger_immutable names the operation).
DROP TRIGGER IF EXISTS ledger_no_truncate ON idem.ledger;
CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON idem.ledger
  FOR EACH STATEMENT EXECUTE FUNCTION idem.ledger_immutable();

-- Every inserted entry moves its account's balance, whoever inserts it (idem.ledger_append or a
-- direct INSERT / COPY): AFTER the row is in, so an insert that ON CONFLICT skipped moves
-- nothing. SECURITY DEFINER: a role allowed to append entries needs no right on idem.balances.
-- The flag it sets is what idem.balances_guard lets through; the SET clause restores it when
-- the function returns.
CREATE OR REPLACE FUNCTION idem.ledger_apply() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET idem.balance_writer = '' AS $$
BEGIN
  PERFORM set_config('idem.balance_writer', 'ledger', true);
  INSERT INTO idem.balances AS b (account, balance) VALUES (NEW.account, NEW.amount)
  ON CONFLICT (account) DO UPDATE SET balance = b.balance + EXCLUDED.balance;
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS ledger_apply ON idem.ledger;
CREATE TRIGGER ledger_apply AFTER INSERT ON idem.ledger
  FOR EACH ROW EXECUTE FUNCTION idem.ledger_apply();

-- Balances are derived: any write but idem.ledger_apply's is refused (ID002, as for the
-- ledger). An unset flag compares as NULL, which does not let the write through.
CREATE OR REPLACE FUNCTION idem.balances_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('INSERT', 'UPDATE')
     AND current_setting('idem.balance_writer', true) = 'ledger' THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'idem.balances is derived from idem.ledger (% refused); append an entry with idem.ledger_append',
    TG_OP USING ERRCODE = 'ID002';
END $$;
DROP TRIGGER IF EXISTS balances_guard ON idem.balances;
CREATE TRIGGER balances_guard BEFORE INSERT OR UPDATE OR DELETE ON idem.balances
  FOR EACH ROW EXECUTE FUNCTION idem.balances_guard();
DROP TRIGGER IF EXISTS balances_no_truncate ON idem.balances;
CREATE TRIGGER balances_no_truncate BEFORE TRUNCATE ON idem.balances
  FOR EACH STATEMENT EXECUTE FUNCTION idem.balances_guard();

-- Version 2's contract; the balance now moves in idem.ledger_apply, and ids are bounded.
CREATE OR REPLACE FUNCTION idem.ledger_append(account text, txn_id text, amount bigint,
                                              meta jsonb DEFAULT '{}')
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
  v_account text;
  v_amount  bigint;
BEGIN
  IF coalesce(ledger_append.account, '') = '' OR coalesce(ledger_append.txn_id, '') = ''
     OR ledger_append.amount IS NULL THEN
    RAISE EXCEPTION 'idem.ledger_append: account and txn_id must be non-empty, amount not null'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF octet_length(ledger_append.account) > 1024 OR octet_length(ledger_append.txn_id) > 1024 THEN
    RAISE EXCEPTION 'idem.ledger_append: account and txn_id must be at most 1024 bytes (got % and %)',
      octet_length(ledger_append.account), octet_length(ledger_append.txn_id)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  INSERT INTO idem.ledger (txn_id, account, amount, meta)
  VALUES (ledger_append.txn_id, ledger_append.account, ledger_append.amount,
          coalesce(ledger_append.meta, '{}'))
  ON CONFLICT (txn_id) DO NOTHING;
  IF FOUND THEN RETURN true; END IF;
  SELECT l.account, l.amount INTO v_account, v_amount
    FROM idem.ledger l WHERE l.txn_id = ledger_append.txn_id;
  IF v_account IS DISTINCT FROM ledger_append.account
     OR v_amount IS DISTINCT FROM ledger_append.amount THEN
    RAISE EXCEPTION 'idem.ledger_append: txn_id % is already in the ledger for another account or amount',
      ledger_append.txn_id
      USING ERRCODE = 'ID001',
            DETAIL = format('recorded: account %s amount %s; offered: account %s amount %s',
                            v_account, v_amount, ledger_append.account, ledger_append.amount);
  END IF;
  RETURN false;
END $$;

-- A NULL or empty account is an error, not a balance of 0.
CREATE OR REPLACE FUNCTION idem.ledger_balance(account text) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
  IF coalesce(ledger_balance.account, '') = '' THEN
    RAISE EXCEPTION 'idem.ledger_balance: account must be non-empty'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN coalesce((SELECT b.balance FROM idem.balances b
                    WHERE b.account = ledger_balance.account), 0);
END $$;

-- ---- state guard ------------------------------------------------------------------------------

-- Version 2's contract, failing closed: a NULL allowed_from or a NULL element in it, and a
-- NULL, empty or over-long kind, id or to_state, are 22023 (a NULL element made
-- `v_state = ANY (allowed_from)` NULL, and the refusal never fired).
CREATE OR REPLACE FUNCTION idem.transition(kind text, id text, to_state text,
                                           allowed_from text[])
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
  v_state text;
BEGIN
  IF coalesce(transition.kind, '') = '' OR coalesce(transition.id, '') = ''
     OR coalesce(transition.to_state, '') = '' OR transition.to_state = 'none' THEN
    RAISE EXCEPTION 'idem.transition: kind, id and to_state must be non-empty, to_state not ''none'''
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF octet_length(transition.kind) > 1024 OR octet_length(transition.id) > 1024 THEN
    RAISE EXCEPTION 'idem.transition: kind and id must be at most 1024 bytes (got % and %)',
      octet_length(transition.kind), octet_length(transition.id)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF transition.allowed_from IS NULL
     OR EXISTS (SELECT 1 FROM unnest(transition.allowed_from) AS f(s) WHERE f.s IS NULL) THEN
    RAISE EXCEPTION 'idem.transition: allowed_from must be an array of states without NULLs, not %',
      coalesce(transition.allowed_from::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  LOOP
    SELECT s.state INTO v_state FROM idem.states s
     WHERE s.kind = transition.kind AND s.id = transition.id FOR UPDATE;
    IF FOUND THEN
      IF v_state = transition.to_state THEN RETURN 'already'; END IF;
      IF (v_state = ANY (transition.allowed_from)) IS NOT TRUE THEN RETURN 'refused'; END IF;
      UPDATE idem.states s SET state = transition.to_state, updated_at = now()
       WHERE s.kind = transition.kind AND s.id = transition.id;
      RETURN 'applied';
    END IF;
    IF ('none' = ANY (transition.allowed_from)) IS NOT TRUE THEN RETURN 'refused'; END IF;
    INSERT INTO idem.states (kind, id, state)
    VALUES (transition.kind, transition.id, transition.to_state)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN RETURN 'applied'; END IF;
    -- Another transaction created the row and committed meanwhile: read it again.
  END LOOP;
END $$;

-- A NULL or empty kind or id is an error, not the state 'none'.
CREATE OR REPLACE FUNCTION idem.state_of(kind text, id text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
  IF coalesce(state_of.kind, '') = '' OR coalesce(state_of.id, '') = '' THEN
    RAISE EXCEPTION 'idem.state_of: kind and id must be non-empty'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN coalesce((SELECT s.state FROM idem.states s
                    WHERE s.kind = state_of.kind AND s.id = state_of.id), 'none');
END $$;

-- ---- side-effect intents ----------------------------------------------------------------------

-- Replaced with the search_path they were bound to (the record schema of the store that first
-- installed them; see 002_worker_layer.sql), whichever store schema migrates.
DO $install$
DECLARE
  v_bound  text;
  v_caller text := current_setting('search_path');
BEGIN
  SELECT substring(c FROM '^search_path=(.*)$') INTO v_bound
    FROM pg_proc p CROSS JOIN LATERAL unnest(p.proconfig) AS c
   WHERE p.oid = to_regprocedure('idem.intent_begin(text, interval)')
     AND c LIKE 'search_path=%';
  PERFORM set_config('search_path', coalesce(v_bound, v_caller), true);
  EXECUTE $create$
    -- As in version 2; intent_id follows the rule for keys, the lease is at most 3650 days.
    CREATE OR REPLACE FUNCTION idem.intent_begin(intent_id text,
                                                 lease interval DEFAULT interval '30 seconds',
                                                 OUT outcome text, OUT token bigint,
                                                 OUT retry_after_ms bigint)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $body$
    DECLARE
      r record;
      v_lease numeric := extract(epoch FROM lease) * 1000;
    BEGIN
      IF intent_id IS NULL OR intent_id !~ '^[!-~]{1,255}$' THEN
        RAISE EXCEPTION 'idem.intent_begin: intent_id must be 1 to 255 visible ASCII characters (0x21 to 0x7E), as a key'
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      IF v_lease IS NULL OR v_lease < 1 OR v_lease > 3650 * 86400000::numeric THEN
        RAISE EXCEPTION 'idem.intent_begin: lease must be 1 millisecond to 3650 days, not %',
          coalesce(lease::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
      END IF;
      SELECT * INTO r FROM idem_begin(idem.intent_scope_id(intent_id), 'idem.intent', '',
                                      intent_id, sha256(convert_to('idem intent', 'UTF8')),
                                      floor(v_lease)::bigint, 86400000, NULL);
      outcome := CASE r.o_outcome WHEN 1 THEN 'acquired' WHEN 2 THEN 'taken_over'
                                  WHEN 3 THEN 'sent' WHEN 4 THEN 'pending' END;
      IF outcome IS NULL THEN
        RAISE EXCEPTION 'idem.intent_begin: scope of intent % holds a foreign record', intent_id
          USING ERRCODE = 'data_corrupted';
      END IF;
      token := r.o_token;
      retry_after_ms := r.o_retry_after_ms;
    END $body$;

    -- As in version 2, failing closed: a NULL keep was greatest(1, NULL) = 1 ms (the intent
    -- could be sent again at once); now it is 22023, as are a NULL token and an invalid id.
    CREATE OR REPLACE FUNCTION idem.intent_sent(intent_id text, token bigint,
                                                keep interval DEFAULT interval '30 days')
    RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $body$
    DECLARE
      v_keep numeric := extract(epoch FROM keep) * 1000;
    BEGIN
      IF intent_id IS NULL OR intent_id !~ '^[!-~]{1,255}$' OR token IS NULL THEN
        RAISE EXCEPTION 'idem.intent_sent: intent_id must be 1 to 255 visible ASCII characters, token not NULL'
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      IF v_keep IS NULL OR v_keep < 1 OR v_keep > 3650 * 86400000::numeric THEN
        RAISE EXCEPTION 'idem.intent_sent: keep must be 1 millisecond to 3650 days, not %',
          coalesce(keep::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
      END IF;
      RETURN idem_complete(idem.intent_scope_id(intent_id), token, int4send(204) || int4send(0),
                           floor(v_keep)::bigint, NULL);
    END $body$;

    CREATE OR REPLACE FUNCTION idem.intent_release(intent_id text, token bigint)
    RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $body$
    BEGIN
      IF intent_id IS NULL OR intent_id !~ '^[!-~]{1,255}$' OR token IS NULL THEN
        RAISE EXCEPTION 'idem.intent_release: intent_id must be 1 to 255 visible ASCII characters, token not NULL'
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      RETURN idem_release(idem.intent_scope_id(intent_id), token, NULL);
    END $body$;
  $create$;
  PERFORM set_config('search_path', v_caller, true);
END $install$;

SELECT idem.inbox_dispatch_build();

-- ---- the record store's functions (in the schema of the store being migrated) ----------------

-- A NULL fingerprint compared with `<>` is NULL, not a mismatch: idem_begin answered a replay
-- or took the key over for it, and idem_tier_settle overwrote another request's record. Both
-- compare with IS DISTINCT FROM now, and idem_tier_settle refuses NULL arguments. The bodies
-- are versions 10 and 11's otherwise.
CREATE OR REPLACE FUNCTION idem_begin(
    p_scope_id bytea, p_tenant text, p_client text, p_key text, p_fingerprint bytea,
    p_lease_ms bigint, p_abandoned_ms bigint, p_now bigint,
    OUT o_outcome smallint, OUT o_token bigint, OUT o_previous_token bigint,
    OUT o_retry_after_ms bigint, OUT o_response bytea)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
  v_row idem_records%ROWTYPE;
  v_live boolean;
  v_deadline bigint;
  v_expires bigint;
  v_retried boolean := false;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'idem_begin needs READ COMMITTED isolation, not %',
      current_setting('transaction_isolation') USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  SELECT * INTO v_row FROM idem_records r
   WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now
   ORDER BY r.expires_ms DESC LIMIT 1;
  v_live := FOUND;
  IF v_live THEN
    IF v_row.fingerprint IS DISTINCT FROM p_fingerprint THEN o_outcome := 5; RETURN; END IF;
    IF v_row.state = 2 THEN o_outcome := 3; o_response := v_row.response; RETURN; END IF;
    IF v_now < v_row.lease_deadline_ms THEN
      o_outcome := 4;
      o_retry_after_ms := greatest(1, v_row.lease_deadline_ms - v_now);
      o_response := v_row.response;
      RETURN;
    END IF;
  END IF;
  o_token := nextval('idem_fence_seq');
  v_deadline := v_now + p_lease_ms;
  v_expires := v_deadline + p_abandoned_ms;
  LOOP
    BEGIN
      IF v_live THEN
        UPDATE idem_records r
           SET token = o_token, lease_deadline_ms = v_deadline, expires_ms = v_expires,
               response = NULL
         WHERE r.scope_id = p_scope_id AND r.expires_ms = v_row.expires_ms;
        o_outcome := 2;
        o_previous_token := v_row.token;
      ELSE
        INSERT INTO idem_records (scope_id, tenant, client, key, fingerprint, state, token,
                                  lease_deadline_ms, created_ms, expires_ms)
        VALUES (p_scope_id, p_tenant, p_client, p_key, p_fingerprint, 1, o_token,
                v_deadline, v_now, v_expires);
        o_outcome := 1;
      END IF;
      RETURN;
    EXCEPTION WHEN check_violation THEN  -- 23514: no partition for the row's day
      IF v_retried OR NOT idem_ensure_partition(v_expires) THEN RAISE; END IF;
      v_retried := true;
    END;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION idem_tier_begin(
    p_scope_id bytea, p_tenant text, p_client text, p_key text, p_fingerprint bytea,
    p_lease_ms bigint, p_abandoned_ms bigint, p_token_floor bigint, p_now bigint,
    OUT o_outcome smallint, OUT o_token bigint, OUT o_previous_token bigint,
    OUT o_retry_after_ms bigint, OUT o_response bytea)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
  v_row idem_records%ROWTYPE;
  v_live boolean;
  v_deadline bigint;
  v_expires bigint;
  v_retried boolean := false;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'idem_tier_begin needs READ COMMITTED isolation, not %',
      current_setting('transaction_isolation') USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  SELECT * INTO v_row FROM idem_records r
   WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now
   ORDER BY r.expires_ms DESC LIMIT 1;
  v_live := FOUND;
  IF v_live THEN
    IF v_row.fingerprint IS DISTINCT FROM p_fingerprint THEN o_outcome := 5; RETURN; END IF;
    IF v_row.state = 2 THEN o_outcome := 3; o_response := v_row.response; RETURN; END IF;
    IF v_now < v_row.lease_deadline_ms THEN
      o_outcome := 4;
      o_retry_after_ms := greatest(1, v_row.lease_deadline_ms - v_now);
      o_response := v_row.response;
      RETURN;
    END IF;
  END IF;
  o_token := greatest(CASE WHEN v_live THEN v_row.token + 1 ELSE 1 END,
                      CASE WHEN p_token_floor > 0 THEN p_token_floor ELSE v_now * 1024 END);
  v_deadline := v_now + p_lease_ms;
  v_expires := v_deadline + p_abandoned_ms;
  LOOP
    BEGIN
      IF v_live THEN
        UPDATE idem_records r
           SET token = o_token, lease_deadline_ms = v_deadline, expires_ms = v_expires,
               response = NULL
         WHERE r.scope_id = p_scope_id AND r.expires_ms = v_row.expires_ms;
        o_outcome := 2;
        o_previous_token := v_row.token;
      ELSE
        INSERT INTO idem_records (scope_id, tenant, client, key, fingerprint, state, token,
                                  lease_deadline_ms, created_ms, expires_ms)
        VALUES (p_scope_id, p_tenant, p_client, p_key, p_fingerprint, 1, o_token,
                v_deadline, v_now, v_expires);
        o_outcome := 1;
      END IF;
      RETURN;
    EXCEPTION WHEN check_violation THEN  -- 23514: no partition for the row's day
      IF v_retried OR NOT idem_ensure_partition(v_expires) THEN RAISE; END IF;
      v_retried := true;
    END;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION idem_tier_settle(
    p_scope_id bytea, p_tenant text, p_client text, p_key text, p_fingerprint bytea,
    p_token bigint, p_state smallint, p_response bytea, p_keep_ms bigint, p_abandoned_ms bigint,
    p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
  v_row idem_records%ROWTYPE;
  v_live boolean;
  v_deadline bigint;
  v_expires bigint;
  v_retried boolean := false;
BEGIN
  IF p_scope_id IS NULL OR p_fingerprint IS NULL OR p_token IS NULL OR p_state IS NULL
     OR p_keep_ms IS NULL OR p_abandoned_ms IS NULL THEN
    RAISE EXCEPTION 'idem_tier_settle: scope, fingerprint, token, state and durations must not be NULL'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  SELECT * INTO v_row FROM idem_records r
   WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now
   ORDER BY r.expires_ms DESC LIMIT 1;
  v_live := FOUND;
  IF v_live THEN
    IF v_row.state = 2 OR v_row.token > p_token
       OR v_row.fingerprint IS DISTINCT FROM p_fingerprint THEN
      RETURN false;
    END IF;
  END IF;
  IF p_state = 2 THEN
    v_deadline := v_now;
    v_expires := v_now + p_keep_ms;
  ELSE
    v_deadline := v_now + p_keep_ms;
    v_expires := v_deadline + p_abandoned_ms;
  END IF;
  LOOP
    BEGIN
      IF v_live THEN
        UPDATE idem_records r
           SET state = p_state, token = p_token, lease_deadline_ms = v_deadline,
               expires_ms = v_expires, response = p_response
         WHERE r.scope_id = p_scope_id AND r.expires_ms = v_row.expires_ms;
      ELSE
        INSERT INTO idem_records (scope_id, tenant, client, key, fingerprint, state, token,
                                  lease_deadline_ms, created_ms, expires_ms, response)
        VALUES (p_scope_id, p_tenant, p_client, p_key, p_fingerprint, p_state, p_token,
                v_deadline, v_now, v_expires, p_response);
      END IF;
      RETURN true;
    EXCEPTION WHEN check_violation THEN
      IF v_retried OR NOT idem_ensure_partition(v_expires) THEN RAISE; END IF;
      v_retried := true;
    END;
  END LOOP;
END $$;
