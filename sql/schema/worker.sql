-- The worker layer: building blocks a service calls inside its own transaction to make its
-- effects exactly-once, from C++ (include/idem/worker.h) or any other language. docs/worker.md
-- explains each one and states every limit.
--
--   inbox        idem.inbox_claim: handler-level dedupe of (consumer, message id)
--   ledger       idem.ledger_append: immutable entries, balances derived from them
--   state guard  idem.transition: "ensure state", an entity moved at most once
--   intents      idem.intent_begin / intent_sent: the record state machine for a side effect
--
-- Unlike the record store, whose schema is configurable (the store URL's `schema=`),
-- everything here lives in the fixed schema `idem`, so every caller can write
-- `idem.inbox_claim(...)` without knowing how a store was configured, and every function
-- names its tables schema-qualified and works whatever the caller's search_path. The intent
-- functions are the exception (see their section). Two stores with different `schema=` in one
-- database share this layer.
--
-- Fail closed: NULL, empty or over-long arguments are SQLSTATE 22023 (invalid_parameter_value),
-- never a silent pass (a PL/pgSQL `IF c` skips its branch when c is NULL, and greatest(1, NULL)
-- is 1, so every guard here is written to refuse a NULL). Ids that go into an index (consumer,
-- message id, account, txn id, kind, entity id) are at most 1,024 bytes; intent ids follow the
-- rule for keys (1 to 255 visible ASCII characters); retention is at most 366 days; leases and
-- keeps at most 3,650 days.

CREATE SCHEMA IF NOT EXISTS idem;

-- ---- inbox: handler-level dedupe ---------------------------------------------------------------

-- One row per claimed (consumer, message id), in the partition of the UTC day it may be
-- dropped (idem.inbox_pYYYYMMDD). That day is derived from the message id, so that any
-- redelivery can find the claim by probing two known partitions rather than all of them: with
-- a retention of K whole days, the message hashes to a slot h in [0, K), and a claim made on
-- day d expires on the first day >= d + K that is congruent to h modulo K
-- (idem.inbox_expiry_day). A redelivery on a day d' with d' - d <= K computes e' in
-- [d' + K, d' + 2K) with e' = e (mod K), so e is e' or e' - K. A claim is therefore kept
-- between K and 2K + 1 days. Uniqueness across partitions comes from idem.inbox_claim (an
-- advisory lock on the pair, then that probe); the primary key makes it hold within a day
-- even for a writer that bypasses the function.
CREATE TABLE IF NOT EXISTS idem.inbox (
  consumer    text        NOT NULL,
  message_id  text        NOT NULL,
  claimed_at  timestamptz NOT NULL DEFAULT now(),
  expires_on  date        NOT NULL,
  PRIMARY KEY (consumer, message_id, expires_on)
) PARTITION BY RANGE (expires_on);

-- Per-consumer retention (idem.inbox_retention); consumers without a row keep their claims 30
-- days. The previous retention is remembered so that claims made under it are still found for
-- 2 x its length after a change.
CREATE TABLE IF NOT EXISTS idem.inbox_consumers (
  consumer      text        PRIMARY KEY,
  keep          interval    NOT NULL CHECK (keep >= interval '0'),
  previous_keep interval    NOT NULL,
  changed_at    timestamptz NOT NULL
);

-- At most 366 days, so that about 1,100 day partitions exist at most (a query on the parent
-- that cannot prune takes one lock per partition; the default lock table holds 6,400), and
-- every day a partition is made for has a four-digit year. NOT VALID: a row written before
-- the bound existed keeps its longer retention; new and changed rows are checked.
DO $$
BEGIN
  ALTER TABLE idem.inbox_consumers ADD CONSTRAINT inbox_consumers_keep_bounded
    CHECK (keep <= interval '366 days') NOT VALID;
EXCEPTION WHEN duplicate_object THEN
  NULL;
END $$;

-- The UTC day the generated dispatch (below) was last built for: its window starts there.
CREATE TABLE IF NOT EXISTS idem.inbox_dispatch_window (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  built_on date    NOT NULL
);

-- A retention in whole days, at least 1; NULL for NULL (STRICT). PL/pgSQL rather than SQL here
-- and below: PostgreSQL re-plans a non-inlined SQL function at every call, while PL/pgSQL
-- evaluates these as simple expressions.
CREATE OR REPLACE FUNCTION idem.inbox_days(keep interval) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
BEGIN
  RETURN greatest(1, ceil(extract(epoch FROM keep) / 86400.0))::integer;
END $$;

-- The UTC day a claim of message_id made at `at` expires on, for retention `keep` (see
-- idem.inbox). The slot comes from md5, which, unlike hashtext, is the same on every
-- PostgreSQL version. NULL for any NULL argument.
CREATE OR REPLACE FUNCTION idem.inbox_expiry_day(message_id text, keep interval, at timestamptz)
RETURNS date LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
  k    integer := greatest(1, ceil(extract(epoch FROM keep) / 86400.0))::integer;
  base integer := floor(extract(epoch FROM at) / 86400)::integer + k;
  slot integer := ((('x' || substr(md5(message_id), 1, 8))::bit(32)::integer % k) + k) % k;
BEGIN
  RETURN date '1970-01-01' + (base + ((slot - base) % k + k) % k);
END $$;

-- Sets how long a consumer's claims are kept: at least `keep` (0 to 366 days, rounded up to
-- whole days, at least one) and at most twice that plus a day. Earlier claims keep the day
-- they were given and are still found; after two changes within 2 x the older retention,
-- claims made before the first change may be missed by a redelivery. 22023 for an empty or
-- over-long consumer, or a keep out of bounds.
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

-- Creates the partition of day p_day unless it exists, without rebuilding the dispatch; returns
-- whether it created it. CREATE + ATTACH (a SHARE UPDATE EXCLUSIVE lock on idem.inbox: claims
-- carry on meanwhile), under advisory lock (6906989, 3) so concurrent creators take turns.
-- Days outside the years 1970 to 9999 are 22023, so every name is inbox_p and 8 digits.
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

-- Creates the partition of day p_day, and that of p_day - 30 when a claim made today under the
-- default 30-day retention can expire on p_day (today + 30 to today + 61, the sweep's horizon
-- included), so that the fast path knows both partitions such a claim can be in. Rebuilds the
-- dispatch when it created a day inside the dispatch's window. Returns whether it created
-- p_day's partition.
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

-- ---- inbox: the generated dispatch and the claim's fast path -------------------------------
--
-- A statement on the partitioned parent idem.inbox, kept as a generic plan, locks every
-- partition when it runs (pruning happens after the locks): 2K + 3 relation locks per claim for
-- a K-day retention. So the claim's common case runs statements that name the partition
-- tables themselves, in two functions that idem.inbox_dispatch_build generates (EXECUTE
-- format) for the partitions that exist, and rebuilds whenever a partition inside its window
-- is created or dropped, in the same transaction, under the partition lock. The generation is
-- essential: the functions' text depends on which partitions exist at run time.
--
--   idem.inbox_at(p_insert, p_day, p_consumer, p_message_id): a binary search on p_day over
--     the window's partitions, then the day's statement: a probe of that partition for the
--     pair (p_insert false) or the claim's insert there (true, ON CONFLICT DO NOTHING,
--     answering whether it inserted). NULL for a day it has no branch for.
--
--   idem.inbox_claim(consumer, message_id): true the first time the pair is claimed, false if
--     it already was. Its common case -- arguments valid, not REPEATABLE READ, the consumer on
--     the default 30-day retention with no recent change, and both partitions the claim can be
--     in known -- is one expression (the arguments, the isolation level, the pair's advisory
--     lock, the expiry day for K = 30) and then one statement naming the day's two
--     partitions:
--       INSERT INTO <day's partition> SELECT ... WHERE NOT EXISTS (<probe of day - 30's>)
--       ON CONFLICT DO NOTHING
--     which runs after the lock, so with a fresh snapshot (READ COMMITTED) it sees a claim
--     committed meanwhile in the older partition, and ON CONFLICT finds one in the same day's.
--     Everything else goes to idem.inbox_claim_full, the general path, which takes the same
--     advisory lock (it is re-entrant) and raises the errors. It runs with
--     plan_cache_mode = force_generic_plan: its statements are index probes on named
--     partitions, and PostgreSQL would otherwise plan each afresh for its first five runs in
--     every session.
--
-- The window is the partitions of today through today + 69: every day a claim under the
-- default retention touches (today to today + 61). A claim under a longer retention reaches a
-- day beyond it by name (idem.inbox_probe). Partitions created beyond the window need no
-- rebuild; the sweep rebuilds when the window has moved (a new day). A database's current
-- text: SELECT pg_get_functiondef('idem.inbox_claim(text, text)'::regprocedure);

-- The body of idem.inbox_at for the sorted days[lo..hi]: a binary search on p_day, so a call
-- makes about log2(partitions) comparisons, then the day's two statements.
CREATE OR REPLACE FUNCTION idem.inbox_dispatch_src(days date[], lo integer, hi integer)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v_mid   integer;
  v_table text;
BEGIN
  IF lo > hi THEN RETURN 'RETURN NULL;'; END IF;
  IF lo = hi THEN
    v_table := 'idem.' || quote_ident('inbox_p' || to_char(days[lo], 'YYYYMMDD'));
    RETURN format($f$IF p_day = %L::date THEN
  IF p_insert THEN
    INSERT INTO %s (consumer, message_id, expires_on)
    VALUES (p_consumer, p_message_id, p_day) ON CONFLICT DO NOTHING;
    RETURN FOUND;
  END IF;
  RETURN EXISTS (SELECT 1 FROM %s i WHERE i.consumer = p_consumer AND i.message_id = p_message_id);
END IF;
RETURN NULL;$f$, days[lo], v_table, v_table);
  END IF;
  v_mid := (lo + hi) / 2;
  RETURN format(E'IF p_day <= %L::date THEN\n%s\nEND IF;\n%s', days[v_mid],
                idem.inbox_dispatch_src(days, lo, v_mid),
                idem.inbox_dispatch_src(days, v_mid + 1, hi));
END $$;

-- The fast path's claim for the sorted days[lo..hi]: a binary search on v_day, then the day's
-- single statement. `days` holds only the days whose partition of day - 30 exists too; any
-- other day falls through to the general path.
CREATE OR REPLACE FUNCTION idem.inbox_claim_src(days date[], lo integer, hi integer)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v_mid integer;
BEGIN
  IF lo > hi THEN RETURN ''; END IF;
  IF lo = hi THEN
    RETURN format($f$IF v_day = %L::date THEN
  INSERT INTO idem.%I (consumer, message_id, expires_on)
  SELECT inbox_claim.consumer, inbox_claim.message_id, v_day
   WHERE NOT EXISTS (SELECT 1 FROM idem.%I o
                      WHERE o.consumer = inbox_claim.consumer
                        AND o.message_id = inbox_claim.message_id)
     AND NOT EXISTS (SELECT 1 FROM idem.inbox_consumers c
                      WHERE c.consumer = inbox_claim.consumer
                        AND NOT (c.keep = interval '30 days'
                                 AND (c.previous_keep = interval '30 days'
                                      OR now() >= c.changed_at + 2 * c.previous_keep
                                                  + interval '2 days')))
  ON CONFLICT DO NOTHING;
  IF FOUND THEN RETURN true; END IF;
END IF;$f$, days[lo], 'inbox_p' || to_char(days[lo], 'YYYYMMDD'),
                  'inbox_p' || to_char(days[lo] - 30, 'YYYYMMDD'));
  END IF;
  v_mid := (lo + hi) / 2;
  RETURN format(E'IF v_day <= %L::date THEN\n%s\nELSE\n%s\nEND IF;', days[v_mid],
                idem.inbox_claim_src(days, lo, v_mid), idem.inbox_claim_src(days, v_mid + 1, hi));
END $$;

-- (Re)creates idem.inbox_at and idem.inbox_claim for the partitions inside the window that
-- exist now, under the partition lock, and records the day it built for. In the fast path's
-- expression an over-long id goes to idem.inbox_claim_full, which raises.
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

-- Probes day p_day's partition for the pair: through idem.inbox_at, or by name for a
-- partition it does not know. False when the day has no partition.
CREATE OR REPLACE FUNCTION idem.inbox_probe(p_day date, p_consumer text, p_message_id text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_found boolean := idem.inbox_at(false, p_day, p_consumer, p_message_id);
  v_name  text;
BEGIN
  IF v_found IS NOT NULL THEN RETURN v_found; END IF;
  v_name := 'inbox_p' || to_char(p_day, 'YYYYMMDD');
  IF to_regclass('idem.' || v_name) IS NULL THEN RETURN false; END IF;
  EXECUTE format('SELECT EXISTS (SELECT 1 FROM idem.%I WHERE consumer = $1 AND message_id = $2)',
                 v_name)
    INTO v_found USING p_consumer, p_message_id;
  RETURN v_found;
END $$;

-- The claim's general path, with idem.inbox_claim's contract: true the first time
-- (consumer, message_id) is claimed, false if it already was. Takes the pair's advisory lock,
-- probes the two (four while a retention change is recent) day partitions the claim can be
-- in, then inserts into the expiry day's partition. A concurrent claim of the same pair waits
-- on the lock until this transaction ends, then probes with a fresh snapshot (READ COMMITTED)
-- and sees the committed claim, or nothing after a rollback. REPEATABLE READ is refused
-- (55000: its probe would use a snapshot older than the lock); SERIALIZABLE is safe (a racing
-- pair fails with 40001). 22023 for an empty or over-long consumer or message id.
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

-- ---- inbox: the sweep ---------------------------------------------------------------------------

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
-- from its bounds. 22023 for a p_now more than 3,660 days from the server's clock, or a
-- horizon outside 0 to 366 days.
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

-- One step (idem.inbox_sweep_step); returns the claims it dropped. Run idem.inbox_sweep_all,
-- or the step until done, to finish a sweep.
CREATE OR REPLACE FUNCTION idem.inbox_sweep(p_now timestamptz DEFAULT now(),
                                            p_horizon_days integer DEFAULT 2)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
  SELECT s.claims_dropped FROM idem.inbox_sweep_step(p_now, p_horizon_days) s
$$;

-- The whole sweep, one step per transaction (CALL it outside a transaction block: from psql,
-- cron or pg_cron), so no lock is held longer than a step. Reports what it did in a NOTICE.
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

-- ---- ledger: immutable entries, derived balances -----------------------------------------------

CREATE TABLE IF NOT EXISTS idem.ledger (
  txn_id     text        PRIMARY KEY,
  account    text        NOT NULL,
  amount     bigint      NOT NULL,
  meta       jsonb       NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ledger_account ON idem.ledger (account);

-- Always the sum of the account's entries: written only by idem.ledger_apply.
CREATE TABLE IF NOT EXISTS idem.balances (
  account text   PRIMARY KEY,
  balance bigint NOT NULL
);

-- Entries are immutable: UPDATE, DELETE and TRUNCATE are refused (SQLSTATE ID002); a
-- correction is a new entry.
CREATE OR REPLACE FUNCTION idem.ledger_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'idem.ledger entries are immutable (% refused); append a correcting entry',
    TG_OP USING ERRCODE = 'ID002';
END $$;
DROP TRIGGER IF EXISTS ledger_immutable ON idem.ledger;
CREATE TRIGGER ledger_immutable BEFORE UPDATE OR DELETE ON idem.ledger
  FOR EACH ROW EXECUTE FUNCTION idem.ledger_immutable();
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

-- Appends the entry (its balance moves in idem.ledger_apply, so it can never be applied
-- twice). False when txn_id is already in the ledger with the same account and amount (meta is
-- not compared); SQLSTATE ID001 when it is there with another account or amount. A concurrent
-- append of the same txn id waits on the primary key until the first transaction ends. 22023
-- for an empty or over-long account or txn id, or a NULL amount.
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

-- The account's balance, 0 for an account without entries. 22023 for a NULL or empty account
-- (not a balance of 0).
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

-- ---- state guard: "ensure state" ---------------------------------------------------------------

CREATE TABLE IF NOT EXISTS idem.states (
  kind       text        NOT NULL,
  id         text        NOT NULL,
  state      text        NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (kind, id)
);

-- 'applied' (it was in one of allowed_from, now in to_state), 'already' (it is in to_state),
-- 'refused' (it is in another state). An entity never transitioned is in state 'none'. The
-- entity's row stays locked until the transaction ends, so concurrent transitions take turns;
-- two racing first transitions leave one 'applied' and one 'already'. 22023 for a NULL,
-- empty or over-long kind, id or to_state, a to_state 'none', and a NULL allowed_from or a
-- NULL element in it.
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

-- The entity's state, 'none' if it was never transitioned. 22023 for a NULL or empty kind or id.
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

-- ---- side-effect intents: the record state machine under another name --------------------------

-- The record scope of an intent: tenant 'idem.intent', client '', key the intent id, encoded
-- as the store encodes scopes (pg_calls.cc ScopeId), so the records tools see intents too.
CREATE OR REPLACE FUNCTION idem.intent_scope_id(intent_id text) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
  SELECT sha256(int4send(11) || convert_to('idem.intent', 'UTF8') || int4send(0) ||
                int4send(octet_length(convert_to($1, 'UTF8'))) || convert_to($1, 'UTF8'))
$$;

-- The intent functions are thin wrappers of the record functions (idem_begin, idem_complete,
-- idem_release in records.sql), and records live in a store's schema. So they run with the
-- search_path of the store schema that first installed them (SET search_path FROM CURRENT),
-- and keep it whichever store schema installs them again: this block sets search_path to
-- their current binding, if any, while it creates them, and puts the caller's back after.
DO $install$
DECLARE
  v_bound  text;
  v_caller text := current_setting('search_path');
BEGIN
  -- The search_path an existing function is bound to, if there is one.
  SELECT substring(c FROM '^search_path=(.*)$') INTO v_bound
    FROM pg_proc p CROSS JOIN LATERAL unnest(p.proconfig) AS c
   WHERE p.oid = to_regprocedure('idem.intent_begin(text, interval)')
     AND c LIKE 'search_path=%';
  PERFORM set_config('search_path', coalesce(v_bound, v_caller), true);

    -- Claims the intent for a lease (1 ms to 3650 days). outcome: 'acquired', or
    -- 'taken_over' when the previous owner's lease lapsed (it may or may not have called
    -- downstream) -- either way it is yours: call downstream with Idempotency-Key = intent_id,
    -- then idem.intent_sent; 'sent': done before, skip; 'pending': another owner holds a live
    -- lease, retry after retry_after_ms. 22023 for an intent id that is not 1 to 255 visible
    -- ASCII characters (the rule for keys) or a lease out of bounds.
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

    -- PENDING -> SENT, kept for `keep` (1 ms to 3650 days). False when the token no longer
    -- owns the intent (another owner took over after the lease lapsed): a zombie must not mark
    -- it. 22023 for an invalid intent id, a NULL token or a keep out of bounds.
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

    -- Gives a PENDING intent up (the call failed for good and may be retried from scratch).
    -- False when the token no longer owns it. 22023 for an invalid intent id or a NULL token.
    CREATE OR REPLACE FUNCTION idem.intent_release(intent_id text, token bigint)
    RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $body$
    BEGIN
      IF intent_id IS NULL OR intent_id !~ '^[!-~]{1,255}$' OR token IS NULL THEN
        RAISE EXCEPTION 'idem.intent_release: intent_id must be 1 to 255 visible ASCII characters, token not NULL'
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      RETURN idem_release(idem.intent_scope_id(intent_id), token, NULL);
    END $body$;

  PERFORM set_config('search_path', v_caller, true);
END $install$;

-- Builds the generated dispatch (see "the generated dispatch" above) for the partitions that
-- exist now.
SELECT idem.inbox_dispatch_build();
