-- The tiered store's durable half (docs/stores.md): claims live in Redis, and PostgreSQL holds
-- what must survive losing Redis: completed records, accepted long-running operations, and
-- the claims that replaced an owner (takeovers), which fence that owner's late completion.
--
-- In the store's schema, on idem_records (records.sql). Tokens here are Redis's (time-based:
-- now * 1024, at least the previous token + 1), so a scope's tokens keep increasing across the
-- two tiers and across Redis losing its data.

-- idem_begin (records.sql, same outcomes and isolation rule) with the tiered store's tokens:
-- the new token is at least p_token_floor (the token Redis just issued for the same claim)
-- or, when p_token_floor is 0 (Redis is unreachable and PostgreSQL serves alone),
-- now * 1024, as Redis would have made it; and always above the live record's.
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

-- Writes the record of p_scope_id as owned by p_token: completed with p_response (p_state 2,
-- kept p_keep_ms) or in flight with p_response as its accepted response (p_state 1, a lease
-- of p_keep_ms, kept p_abandoned_ms longer). The claim itself lives in Redis, so there may be
-- no row yet; the row, when there is one, decides:
--   none                                          -> written
--   in flight, same fingerprint, token <= p_token -> written (a takeover's fence, an accepted
--                                                    operation, a claim made here)
--   anything else (a newer owner's claim, another
--   fingerprint, completed already)               -> false, unchanged: fenced
-- A completed row is never written again, as in idem_complete: a caller that lost the reply
-- to its completion reads the record to learn whether it landed. NULL scope, fingerprint,
-- token, state or durations are SQLSTATE 22023.
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
