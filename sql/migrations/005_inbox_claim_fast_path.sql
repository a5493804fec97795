-- worker layer: a one-statement fast path for inbox claims.
--
-- Schema version 5: idem.inbox_claim's common case is one lock-and-lookup statement and one
-- insert.
--
-- Version 4's claim ran about a dozen PL/pgSQL statements and three nested calls of the
-- dispatch function idem.inbox_at per claim, and PL/pgSQL sets each of them up again in every
-- transaction: about 4x the server time of a bare INSERT ... ON CONFLICT DO NOTHING.
--
-- Version 5 generates idem.inbox_claim itself, next to idem.inbox_at, for the day partitions
-- that exist (idem.inbox_dispatch_build, rebuilt whenever a partition is created or dropped, as
-- in version 4). Its common case -- arguments valid, not REPEATABLE READ, the consumer on the
-- default 30-day retention with no recent change, and both partitions the claim can be in known
-- to the generated function -- runs:
--   1. one statement that takes the pair's advisory lock, reads the consumer's retention row
--      and computes the expiry day (idem.inbox_expiry_day, inlined for K = 30);
--   2. a binary search on that day, then one statement naming its two partitions:
--        INSERT INTO <day's partition> SELECT ... WHERE NOT EXISTS (<probe of day - 30's>)
--        ON CONFLICT DO NOTHING
--      which runs after the lock, so with a fresh snapshot (READ COMMITTED) it sees a claim
--      committed meanwhile in the older partition, and ON CONFLICT finds one in the same day's.
-- Everything else (another retention, a recent retention change, a day without a partition or
-- whose older partition is unknown, invalid arguments) goes to idem.inbox_claim_full, version
-- 4's claim unchanged, which takes the same advisory lock again (it is re-entrant).
--
-- So that the older partition is known, idem.inbox_ensure_partition(d) also creates d - 30
-- when that day is not past: in steady state the two already exist (claims of the last 30 days
-- sit in the next 60 days' partitions), and a fresh database gets there after the first claim
-- of each day. The table layout and rows are those of versions 2 to 4.

-- Version 4's claim, under another name: the general path (any retention, retention changes,
-- partitions unknown to the generated functions, argument and isolation errors). Like every
-- statement here it is idempotent (CREATE OR REPLACE), as the earlier versions' are: a second
-- store schema migrating later runs them all again.
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
  -- idem.inbox_at answers NULL for a day it has no branch for; only then the slower by-name
  -- probe runs (idem.inbox_probe).
  v_claimed := idem.inbox_at(false, v_day, inbox_claim_full.consumer, inbox_claim_full.message_id);
  IF v_claimed IS NULL THEN
    v_claimed := idem.inbox_probe(v_day, inbox_claim_full.consumer, inbox_claim_full.message_id);
  END IF;
  IF v_claimed THEN RETURN false; END IF;
  v_claimed := idem.inbox_at(false, v_old, inbox_claim_full.consumer, inbox_claim_full.message_id);
  IF v_claimed IS NULL THEN
    v_claimed := idem.inbox_probe(v_old, inbox_claim_full.consumer, inbox_claim_full.message_id);
  END IF;
  IF v_claimed THEN RETURN false; END IF;
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
  -- First claim of a day without a known partition: create it, then insert via the parent.
  PERFORM idem.inbox_ensure_partition(v_day);
  INSERT INTO idem.inbox (consumer, message_id, expires_on)
  VALUES (inbox_claim_full.consumer, inbox_claim_full.message_id, v_day)
  ON CONFLICT DO NOTHING;
  RETURN FOUND;
END $$;

-- The fast path's claim for the sorted days[lo..hi] (see idem.inbox_dispatch_src): a binary
-- search on v_day, then the day's single statement. `days` holds only the days whose
-- partition of day - 30 exists too; another day falls through to the general path.
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

-- (Re)creates idem.inbox_at (as in version 4) and idem.inbox_claim for the partitions that
-- exist now, under the partition lock.
CREATE OR REPLACE FUNCTION idem.inbox_dispatch_build() RETURNS void
LANGUAGE plpgsql VOLATILE AS $g$
DECLARE
  v_days  date[];
  v_pairs date[];  -- the days whose partition of day - 30 exists too
BEGIN
  PERFORM pg_advisory_xact_lock(6906989, 3);  -- kLockNamespace, kInboxPartitionLock
  SELECT coalesce(array_agg(to_date(substring(c.relname FROM 8), 'YYYYMMDD') ORDER BY c.relname),
                  '{}')
    INTO v_days
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
   WHERE i.inhparent = 'idem.inbox'::regclass AND c.relname ~ '^inbox_p[0-9]{8}$';
  v_pairs := ARRAY(SELECT d FROM unnest(v_days) d WHERE d - 30 = ANY (v_days) ORDER BY d);
  EXECUTE format($f$CREATE OR REPLACE FUNCTION idem.inbox_at(p_insert boolean, p_day date,
                                                   p_consumer text, p_message_id text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $b$
-- Generated by idem.inbox_dispatch_build() for %s day partitions; do not edit.
BEGIN
%s
END $b$$f$, cardinality(v_days), idem.inbox_dispatch_src(v_days, 1, cardinality(v_days)));
  -- True the first time (consumer, message_id) is claimed, false if it already was; the
  -- contract of idem.inbox_claim_full, which answers every case the fast path does not.
  EXECUTE format($f$CREATE OR REPLACE FUNCTION idem.inbox_claim(consumer text, message_id text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $b$
-- Generated by idem.inbox_dispatch_build() for %s day partitions; do not edit.
#variable_conflict use_column
DECLARE
  v_base integer;
  v_day  date;
BEGIN
  IF coalesce(inbox_claim.consumer, '') = '' OR coalesce(inbox_claim.message_id, '') = ''
     OR current_setting('transaction_isolation') = 'repeatable read' THEN
    RETURN idem.inbox_claim_full(inbox_claim.consumer, inbox_claim.message_id);
  END IF;
  -- The advisory lock of idem.inbox_claim_full, and the expiry day idem.inbox_expiry_day
  -- gives for a 30-day retention.
  PERFORM pg_advisory_xact_lock(hashtextextended(
    length(inbox_claim.consumer) || ':' || inbox_claim.consumer || inbox_claim.message_id,
    6906989));
  v_base := floor(extract(epoch FROM now()) / 86400)::integer + 30;
  v_day := date '1970-01-01' + v_base
           + ((((('x' || substr(md5(inbox_claim.message_id), 1, 8))::bit(32)::integer %% 30)
                + 30) %% 30 - v_base) %% 30 + 30) %% 30;
  -- The day's statement inserts only when the pair is in neither partition and the
  -- consumer's retention is the default 30 days with no recent change (no row in
  -- idem.inbox_consumers, or one saying so). Anything else: the general path.
%s
  RETURN idem.inbox_claim_full(inbox_claim.consumer, inbox_claim.message_id);
END $b$$f$, cardinality(v_days), idem.inbox_claim_src(v_pairs, 1, cardinality(v_pairs)));
END $g$;

-- As in version 4, and also creates the partition of p_day - 30 when p_day is a day a claim
-- made today under the default 30-day retention can expire on (today + 30 to today + 61, the
-- sweep's horizon included), so that the fast path knows both partitions such a claim can be
-- in. Rebuilds the generated functions once when it created either.
CREATE OR REPLACE FUNCTION idem.inbox_ensure_partition(p_day date) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_today   date := (now() AT TIME ZONE 'UTC')::date;
  v_pair    boolean := p_day - 30 BETWEEN v_today AND v_today + 31;
  v_created boolean := false;
  v_any     boolean := false;
  v_day     date;
  v_name    text;
BEGIN
  IF to_regclass('idem.inbox_p' || to_char(p_day, 'YYYYMMDD')) IS NOT NULL
     AND (NOT v_pair
          OR to_regclass('idem.inbox_p' || to_char(p_day - 30, 'YYYYMMDD')) IS NOT NULL) THEN
    RETURN false;
  END IF;
  PERFORM pg_advisory_xact_lock(6906989, 3);  -- kLockNamespace, kInboxPartitionLock
  FOREACH v_day IN ARRAY ARRAY[p_day, p_day - 30] LOOP
    CONTINUE WHEN v_day <> p_day AND NOT v_pair;
    v_name := 'inbox_p' || to_char(v_day, 'YYYYMMDD');
    CONTINUE WHEN to_regclass('idem.' || v_name) IS NOT NULL;
    BEGIN
      EXECUTE format('CREATE TABLE idem.%I (LIKE idem.inbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                     v_name);
      EXECUTE format('ALTER TABLE idem.inbox ATTACH PARTITION idem.%I FOR VALUES FROM (%L) TO (%L)',
                     v_name, v_day, v_day + 1);
      v_any := true;
      IF v_day = p_day THEN v_created := true; END IF;
    EXCEPTION WHEN duplicate_table THEN
      NULL;
    END;
  END LOOP;
  IF v_any THEN PERFORM idem.inbox_dispatch_build(); END IF;
  RETURN v_created;
END $$;

SELECT idem.inbox_dispatch_build();
