-- worker layer (schema idem): inbox, ledger, state guard, intents.
--
-- The SQL of the worker layer (schema version 2): the building blocks services call inside
-- their own transactions, from C++ (include/idem/worker.h) or any other language. docs/worker.md
-- explains each one.
--
-- Unlike the record schema, whose name is configurable (the store URL's `schema=`), everything
-- here lives in the fixed schema `idem`, so every caller can write `idem.inbox_claim(...)`
-- without knowing how a store was configured. Every function names its tables schema-qualified
-- and so works whatever the caller's search_path. The exception is the intent functions:
-- they are thin wrappers of the record functions (idem_begin, idem_complete, idem_release) and
-- run with the search_path of the store schema whose migration first installed them
-- (SET search_path FROM CURRENT), which is where their records live.
--
-- Every statement is idempotent, like version 1's: a database where another store schema
-- already installed the worker layer gets the same objects again.

CREATE SCHEMA IF NOT EXISTS idem;

-- ---- inbox: handler-level dedupe -----------------------------------------------------------

-- One row per claimed (consumer, message id), in the partition of the UTC day it may be
-- dropped. That day is derived from the message id, so that any redelivery can find the claim
-- by probing two known partitions rather than all of them: with a retention of K whole days,
-- the message hashes to a slot h in [0, K), and a claim made on day d expires on the first day
-- >= d + K that is congruent to h modulo K (idem.inbox_expiry_day). A redelivery on a day d'
-- with d' - d <= K computes e' in [d' + K, d' + 2K) with e' = e (mod K), so e is e' or e' - K.
-- A claim is therefore kept between K and 2K + 1 days. Uniqueness across partitions comes from
-- idem.inbox_claim (an advisory lock on the pair, then that probe); the primary key makes it
-- hold within a day even for a writer that bypasses the function.
CREATE TABLE IF NOT EXISTS idem.inbox (
  consumer    text        NOT NULL,
  message_id  text        NOT NULL,
  claimed_at  timestamptz NOT NULL DEFAULT now(),
  expires_on  date        NOT NULL,
  PRIMARY KEY (consumer, message_id, expires_on)
) PARTITION BY RANGE (expires_on);

-- Per-consumer retention; consumers without a row keep their claims 30 days. The previous
-- retention is remembered so that claims made under it are still found for 2 x its length.
CREATE TABLE IF NOT EXISTS idem.inbox_consumers (
  consumer      text        PRIMARY KEY,
  keep          interval    NOT NULL CHECK (keep >= interval '0'),
  previous_keep interval    NOT NULL,
  changed_at    timestamptz NOT NULL
);

-- A retention in whole days, at least 1. (PL/pgSQL rather than SQL functions: PostgreSQL 15
-- re-plans a non-inlined SQL function on every call, PL/pgSQL evaluates these as simple
-- expressions.)
CREATE OR REPLACE FUNCTION idem.inbox_days(keep interval) RETURNS integer
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  RETURN greatest(1, ceil(extract(epoch FROM keep) / 86400.0))::integer;
END $$;

-- The UTC day a claim of message_id made at `at` expires on, for retention `keep` (see above).
-- The slot comes from md5, which, unlike hashtext, is the same on every PostgreSQL version.
CREATE OR REPLACE FUNCTION idem.inbox_expiry_day(message_id text, keep interval, at timestamptz)
RETURNS date LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  k    integer := greatest(1, ceil(extract(epoch FROM keep) / 86400.0))::integer;
  base integer := floor(extract(epoch FROM at) / 86400)::integer + k;
  slot integer := ((('x' || substr(md5(message_id), 1, 8))::bit(32)::integer % k) + k) % k;
BEGIN
  RETURN date '1970-01-01' + (base + ((slot - base) % k + k) % k);
END $$;

-- Creates the partition for UTC day p_day unless it exists; returns whether it created it.
-- CREATE + ATTACH (a SHARE UPDATE EXCLUSIVE lock on idem.inbox: claims carry on meanwhile),
-- under an advisory lock so concurrent creators take turns.
CREATE OR REPLACE FUNCTION idem.inbox_ensure_partition(p_day date) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_name text := 'inbox_p' || to_char(p_day, 'YYYYMMDD');
BEGIN
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

-- True the first time (consumer, message_id) is claimed, false if it already was. A concurrent
-- claim of the same pair waits on the advisory lock until this transaction ends, then probes
-- with a fresh snapshot (READ COMMITTED) and sees the committed claim, or nothing after a
-- rollback. Under REPEATABLE READ the probe would use a snapshot older than the lock, so that
-- level is refused; SERIALIZABLE is safe (a racing pair fails with 40001 instead).
CREATE OR REPLACE FUNCTION idem.inbox_claim(consumer text, message_id text) RETURNS boolean
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
BEGIN
  IF coalesce(inbox_claim.consumer, '') = '' OR coalesce(inbox_claim.message_id, '') = '' THEN
    RAISE EXCEPTION 'idem.inbox_claim: consumer and message_id must be non-empty'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF current_setting('transaction_isolation') = 'repeatable read' THEN
    RAISE EXCEPTION 'idem.inbox_claim needs READ COMMITTED or SERIALIZABLE, not REPEATABLE READ'
      USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended(
    length(inbox_claim.consumer) || ':' || inbox_claim.consumer || inbox_claim.message_id, 6906989));
  SELECT c.keep, c.previous_keep, c.changed_at INTO v_keep, v_prev, v_changed
    FROM idem.inbox_consumers c WHERE c.consumer = inbox_claim.consumer;
  IF NOT FOUND THEN v_keep := interval '30 days'; END IF;
  v_day := idem.inbox_expiry_day(inbox_claim.message_id, v_keep, now());
  v_old := v_day - idem.inbox_days(v_keep);
  -- Claims made under the previous retention sit in its slots until they expire.
  IF v_prev IS NOT NULL AND now() < v_changed + 2 * v_prev + interval '2 days' THEN
    v_prev1 := idem.inbox_expiry_day(inbox_claim.message_id, v_prev, now());
    v_prev0 := v_prev1 - idem.inbox_days(v_prev);
  ELSE
    v_prev1 := v_day;
    v_prev0 := v_old;
  END IF;
  -- IN with separate values (not = ANY(array)) lets the executor prune to these partitions.
  IF EXISTS (SELECT 1 FROM idem.inbox i
              WHERE i.consumer = inbox_claim.consumer AND i.message_id = inbox_claim.message_id
                AND i.expires_on IN (v_day, v_old, v_prev1, v_prev0)) THEN
    RETURN false;
  END IF;
  IF to_regclass('idem.inbox_p' || to_char(v_day, 'YYYYMMDD')) IS NULL THEN
    PERFORM idem.inbox_ensure_partition(v_day);
  END IF;
  INSERT INTO idem.inbox (consumer, message_id, expires_on)
  VALUES (inbox_claim.consumer, inbox_claim.message_id, v_day)
  ON CONFLICT DO NOTHING;
  RETURN FOUND;
END $$;

-- Sets how long a consumer's claims are kept: at least `keep` (rounded up to whole days, at
-- least one) and at most twice that plus a day. Earlier claims keep the day they were given and
-- are still found; after two changes within 2 x the older retention, claims made before the
-- first change may be missed by a redelivery.
CREATE OR REPLACE FUNCTION idem.inbox_retention(consumer text, keep interval) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
  IF coalesce(inbox_retention.consumer, '') = '' OR inbox_retention.keep IS NULL
     OR inbox_retention.keep < interval '0' THEN
    RAISE EXCEPTION 'idem.inbox_retention: consumer must be non-empty and keep a non-negative interval'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  INSERT INTO idem.inbox_consumers AS c (consumer, keep, previous_keep, changed_at)
  VALUES (inbox_retention.consumer, inbox_retention.keep, interval '30 days', now())
  ON CONFLICT (consumer) DO UPDATE
    SET keep = EXCLUDED.keep, previous_keep = c.keep, changed_at = now()
    WHERE c.keep IS DISTINCT FROM EXCLUDED.keep;
END $$;

-- Drops every inbox partition whose day ended at or before p_now (all its claims are past
-- their retention), then creates the partitions new claims will need over the next
-- p_horizon_days days. Returns the claims dropped (counted before each drop). Never deletes
-- row by row. lock_timeout keeps DROP's brief ACCESS EXCLUSIVE lock from queueing behind a
-- long transaction and stalling every claim behind it.
CREATE OR REPLACE FUNCTION idem.inbox_sweep(p_now timestamptz DEFAULT now(),
                                            p_horizon_days integer DEFAULT 2)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_today date := (p_now AT TIME ZONE 'UTC')::date;
  v_part record;
  v_rows bigint;
  v_dropped bigint := 0;
  v_keep interval;
BEGIN
  PERFORM set_config('lock_timeout', '2000', true);
  FOR v_part IN
    SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'idem.inbox'::regclass AND c.relname ~ '^inbox_p[0-9]{8}$'
  LOOP
    IF to_date(substring(v_part.relname FROM 8), 'YYYYMMDD') < v_today THEN
      EXECUTE format('SELECT count(*) FROM idem.%I', v_part.relname) INTO v_rows;
      EXECUTE format('DROP TABLE idem.%I', v_part.relname);
      v_dropped := v_dropped + v_rows;
    END IF;
  END LOOP;
  -- New claims over the horizon expire on days in [today + K, today + 2K + horizon).
  FOR v_keep IN SELECT interval '30 days' UNION SELECT keep FROM idem.inbox_consumers LOOP
    FOR i IN idem.inbox_days(v_keep) .. 2 * idem.inbox_days(v_keep) + greatest(p_horizon_days, 0)
    LOOP
      PERFORM idem.inbox_ensure_partition(v_today + i);
    END LOOP;
  END LOOP;
  RETURN v_dropped;
END $$;

-- ---- ledger: immutable entries, derived balances ------------------------------------------

CREATE TABLE IF NOT EXISTS idem.ledger (
  txn_id     text        PRIMARY KEY,
  account    text        NOT NULL,
  amount     bigint      NOT NULL,
  meta       jsonb       NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ledger_account ON idem.ledger (account);

CREATE TABLE IF NOT EXISTS idem.balances (
  account text   PRIMARY KEY,
  balance bigint NOT NULL
);

-- Entries are immutable: a correction is a new entry.
CREATE OR REPLACE FUNCTION idem.ledger_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'idem.ledger entries are immutable (% refused); append a correcting entry',
    TG_OP USING ERRCODE = 'ID002';
END $$;
DROP TRIGGER IF EXISTS ledger_immutable ON idem.ledger;
CREATE TRIGGER ledger_immutable BEFORE UPDATE OR DELETE ON idem.ledger
  FOR EACH ROW EXECUTE FUNCTION idem.ledger_immutable();

-- Appends the entry and adds its amount to the account's balance in one statement: the balance
-- changes only when the entry is inserted, so it can never be applied twice. False when txn_id
-- is already in the ledger with the same account and amount (meta is not compared); SQLSTATE
-- ID001 when it is there with another account or amount. A concurrent append of the same txn
-- id waits on the primary key until the first transaction ends.
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
  WITH appended AS (
    INSERT INTO idem.ledger (txn_id, account, amount, meta)
    VALUES (ledger_append.txn_id, ledger_append.account, ledger_append.amount,
            coalesce(ledger_append.meta, '{}'))
    ON CONFLICT (txn_id) DO NOTHING
    RETURNING account, amount)
  INSERT INTO idem.balances AS b (account, balance)
  SELECT a.account, a.amount FROM appended a
  ON CONFLICT (account) DO UPDATE SET balance = b.balance + EXCLUDED.balance;
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

CREATE OR REPLACE FUNCTION idem.ledger_balance(account text) RETURNS bigint
LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT b.balance FROM idem.balances b WHERE b.account = $1), 0)
$$;

-- ---- state guard: "ensure state" ------------------------------------------------------------

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
-- two racing first transitions leave one 'applied' and one 'already'.
CREATE OR REPLACE FUNCTION idem.transition(kind text, id text, to_state text,
                                           allowed_from text[])
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
  v_state text;
  v_from  text[] := coalesce(transition.allowed_from, '{}');
BEGIN
  IF coalesce(transition.kind, '') = '' OR coalesce(transition.id, '') = ''
     OR coalesce(transition.to_state, '') = '' OR transition.to_state = 'none' THEN
    RAISE EXCEPTION 'idem.transition: kind, id and to_state must be non-empty, to_state not ''none'''
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  LOOP
    SELECT s.state INTO v_state FROM idem.states s
     WHERE s.kind = transition.kind AND s.id = transition.id FOR UPDATE;
    IF FOUND THEN
      IF v_state = transition.to_state THEN RETURN 'already'; END IF;
      IF NOT (v_state = ANY (v_from)) THEN RETURN 'refused'; END IF;
      UPDATE idem.states s SET state = transition.to_state, updated_at = now()
       WHERE s.kind = transition.kind AND s.id = transition.id;
      RETURN 'applied';
    END IF;
    IF NOT ('none' = ANY (v_from)) THEN RETURN 'refused'; END IF;
    INSERT INTO idem.states (kind, id, state)
    VALUES (transition.kind, transition.id, transition.to_state)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN RETURN 'applied'; END IF;
    -- Another transaction created the row and committed meanwhile: read it again.
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION idem.state_of(kind text, id text) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT s.state FROM idem.states s WHERE s.kind = $1 AND s.id = $2), 'none')
$$;

-- ---- side-effect intents: the record state machine under another name ----------------------

-- The record scope of an intent: tenant 'idem.intent', client '', key the intent id, encoded
-- as the store encodes scopes (pg_calls.cc ScopeId), so the records tools see intents too.
CREATE OR REPLACE FUNCTION idem.intent_scope_id(intent_id text) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
  SELECT sha256(int4send(11) || convert_to('idem.intent', 'UTF8') || int4send(0) ||
                int4send(octet_length(convert_to($1, 'UTF8'))) || convert_to($1, 'UTF8'))
$$;

DO $install$
BEGIN
  -- Bound to the record schema of the first store that installs them; see the header comment.
  IF to_regprocedure('idem.intent_begin(text, interval)') IS NOT NULL THEN RETURN; END IF;
  EXECUTE $create$
    -- PENDING (yours: call downstream with Idempotency-Key = intent_id, then intent_sent):
    --   'acquired', or 'taken_over' when the previous owner's lease lapsed (it may or may not
    --   have called). 'sent': done before, skip. 'pending': another owner holds a live lease,
    --   retry after retry_after_ms.
    CREATE FUNCTION idem.intent_begin(intent_id text, lease interval DEFAULT interval '30 seconds',
                                      OUT outcome text, OUT token bigint,
                                      OUT retry_after_ms bigint)
    LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $body$
    DECLARE
      r record;
      v_lease_ms bigint := floor(extract(epoch FROM lease) * 1000)::bigint;
    BEGIN
      IF coalesce(intent_id, '') = '' OR v_lease_ms IS NULL OR v_lease_ms <= 0 THEN
        RAISE EXCEPTION 'idem.intent_begin: intent_id must be non-empty and lease positive'
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      SELECT * INTO r FROM idem_begin(idem.intent_scope_id(intent_id), 'idem.intent', '',
                                      intent_id, sha256(convert_to('idem intent', 'UTF8')),
                                      v_lease_ms, 86400000, NULL);
      outcome := CASE r.o_outcome WHEN 1 THEN 'acquired' WHEN 2 THEN 'taken_over'
                                  WHEN 3 THEN 'sent' WHEN 4 THEN 'pending' END;
      IF outcome IS NULL THEN
        RAISE EXCEPTION 'idem.intent_begin: scope of intent % holds a foreign record', intent_id
          USING ERRCODE = 'data_corrupted';
      END IF;
      token := r.o_token;
      retry_after_ms := r.o_retry_after_ms;
    END $body$;

    -- PENDING -> SENT, kept for `keep`. False when the token no longer owns the intent
    -- (another owner took over after the lease lapsed): a zombie must not mark it.
    CREATE FUNCTION idem.intent_sent(intent_id text, token bigint,
                                     keep interval DEFAULT interval '30 days')
    RETURNS boolean LANGUAGE sql VOLATILE SET search_path FROM CURRENT AS $body$
      SELECT idem_complete(idem.intent_scope_id($1), $2, int4send(204) || int4send(0),
                           greatest(1, floor(extract(epoch FROM $3) * 1000))::bigint, NULL)
    $body$;

    -- Gives a PENDING intent up (the call failed for good and may be retried from scratch).
    -- False when the token no longer owns it.
    CREATE FUNCTION idem.intent_release(intent_id text, token bigint)
    RETURNS boolean LANGUAGE sql VOLATILE SET search_path FROM CURRENT AS $body$
      SELECT idem_release(idem.intent_scope_id($1), $2, NULL)
    $body$;
  $create$;
END $install$;
