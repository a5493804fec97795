-- gateway: long-running operations (accepted responses, operation_complete); idem_watch without the scope lock.
--
-- Version 10 of the PostgreSQL store's schema: long-running operations (Store::Accept), and an
-- idem_watch that no longer takes the scope lock (waiters of one key stop queueing on it).
--
-- An accepted operation is an in-flight record (state 1) whose `response` column holds the
-- accepted response (a 202) until its job completes it; idem_begin hands that response to a
-- duplicate with outcome 4 (in flight), and a takeover after the lease clears it. The job ends
-- the operation from its own transaction with idem.operation_complete or
-- idem.operation_release, addressing the record as the gateway's admin API does: tenant digest
-- and key. docs/postgresql.md explains both.

-- As version 1's, except for an in-flight record: o_response carries its accepted response (null
-- when it has none), and a takeover clears it.
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
  -- Under REPEATABLE READ or SERIALIZABLE the read below would use a snapshot older than the
  -- lock, and a duplicate could miss the row its predecessor just committed.
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
    IF v_row.fingerprint <> p_fingerprint THEN o_outcome := 5; RETURN; END IF;
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

-- Keeps the in-flight record owned by p_token in flight with p_response as its accepted
-- response and a lease of p_lease_ms from now. False when the token does not own it.
CREATE OR REPLACE FUNCTION idem_accept(
    p_scope_id bytea, p_token bigint, p_response bytea, p_lease_ms bigint, p_abandoned_ms bigint,
    p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
  v_expires bigint;
  v_retried boolean := false;
BEGIN
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  v_expires := v_now + p_lease_ms + p_abandoned_ms;
  LOOP
    BEGIN
      UPDATE idem_records r
         SET lease_deadline_ms = v_now + p_lease_ms, expires_ms = v_expires,
             response = p_response
       WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now AND r.state = 1
         AND r.token = p_token;
      RETURN FOUND;
    EXCEPTION WHEN check_violation THEN
      IF v_retried OR NOT idem_ensure_partition(v_expires) THEN RAISE; END IF;
      v_retried := true;
    END;
  END LOOP;
END $$;

-- The scope of a gateway record: tenant digest, no client, key, encoded as the store encodes
-- scopes (pg_calls.cc ScopeId).
CREATE OR REPLACE FUNCTION idem.operation_scope_id(tenant_digest text, key text) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
  SELECT sha256(int4send(octet_length(convert_to($1, 'UTF8'))) || convert_to($1, 'UTF8') ||
                int4send(0) ||
                int4send(octet_length(convert_to($2, 'UTF8'))) || convert_to($2, 'UTF8'))
$$;

-- A response as the store encodes it (response_codec.cc): status, the headers' length, the
-- headers as length-prefixed names and values, then the body. headers is a JSON array of
-- [name, value] pairs, kept in order.
CREATE OR REPLACE FUNCTION idem.encode_response(status integer, headers jsonb, body bytea)
RETURNS bytea LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v_headers bytea := ''::bytea;
  v_pair jsonb;
  v_name bytea;
  v_value bytea;
BEGIN
  IF status IS NULL OR status < 100 OR status > 999 THEN
    RAISE EXCEPTION 'idem: status must be 100 to 999, not %', status
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF headers IS NOT NULL AND jsonb_typeof(headers) <> 'array' THEN
    RAISE EXCEPTION 'idem: headers must be a JSON array of [name, value] pairs'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  FOR v_pair IN SELECT e FROM jsonb_array_elements(coalesce(headers, '[]'::jsonb))
                 WITH ORDINALITY AS t(e, n) ORDER BY n LOOP
    IF jsonb_typeof(v_pair) <> 'array' OR jsonb_array_length(v_pair) <> 2
       OR jsonb_typeof(v_pair -> 0) <> 'string' OR jsonb_typeof(v_pair -> 1) <> 'string' THEN
      RAISE EXCEPTION 'idem: each header must be a [name, value] pair of strings, not %', v_pair
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_name := convert_to(v_pair ->> 0, 'UTF8');
    v_value := convert_to(v_pair ->> 1, 'UTF8');
    v_headers := v_headers || int4send(octet_length(v_name)) || v_name ||
                 int4send(octet_length(v_value)) || v_value;
  END LOOP;
  RETURN int4send(status) || int4send(octet_length(v_headers)) || v_headers ||
         coalesce(body, ''::bytea);
END $$;

-- Version 9's, without the scope lock: the UPDATE's row lock orders a mark against the
-- completion it races, so a burst of waiters no longer queues on the lock their completion
-- needs. Losing the race (the completion updated or moved the row first) means there is nothing
-- in flight to mark: false, and the waiter's next read finds the completion.
CREATE OR REPLACE FUNCTION idem_watch(p_scope_id bytea, p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint := idem_now(p_now);
BEGIN
  BEGIN
    UPDATE idem_records r SET waited = true
     WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now AND r.state = 1 AND NOT r.waited;
    IF FOUND THEN RETURN true; END IF;
  EXCEPTION WHEN serialization_failure THEN  -- 40001: the completion moved the row's partition
    RETURN false;
  END;
  RETURN EXISTS (SELECT 1 FROM idem_records r
                  WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now AND r.state = 1);
END $$;

DO $install$
BEGIN
  -- Bound to the record schema of the first store that installs them, as the intents are.
  IF to_regprocedure('idem.operation_complete(text, text, bigint, integer, jsonb, bytea, interval)')
     IS NOT NULL THEN RETURN; END IF;
  EXECUTE $create$
    -- Completes an accepted long-running operation with its final response, in the caller's
    -- transaction: retries of the request replay it for `keep`. False when `token` no longer
    -- owns the operation (its lease ran out and a retry took it over, or it was released or
    -- purged): a job that was taken over must not overwrite the new owner's result.
    CREATE FUNCTION idem.operation_complete(tenant_digest text, key text, token bigint,
                                            status integer, headers jsonb DEFAULT '[]',
                                            body bytea DEFAULT '',
                                            keep interval DEFAULT interval '24 hours')
    RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $body$
    DECLARE
      v_keep_ms bigint := floor(extract(epoch FROM keep) * 1000)::bigint;
    BEGIN
      IF v_keep_ms IS NULL OR v_keep_ms <= 0 THEN
        RAISE EXCEPTION 'idem.operation_complete: keep must be positive'
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      RETURN idem_complete(idem.operation_scope_id(tenant_digest, key), token,
                           idem.encode_response(status, headers, body), v_keep_ms, NULL);
    END $body$;

    -- Gives an accepted operation up after a transient failure: the next retry executes again.
    -- False when `token` no longer owns it.
    CREATE FUNCTION idem.operation_release(tenant_digest text, key text, token bigint)
    RETURNS boolean LANGUAGE sql VOLATILE SET search_path FROM CURRENT AS $body$
      SELECT idem_release(idem.operation_scope_id($1, $2), $3, NULL)
    $body$;
  $create$;
END $install$;
