-- operations: idem.operation_complete and idem.operation_release refuse a NULL tenant digest, key or token (22023).
--
-- Before, a NULL among them addressed no record and the call answered false, which a job reads
-- as "my token no longer owns this operation" (taken over, released or purged): a bug in the
-- job's own query looked like a takeover, and the operation stayed in flight until its lease
-- ran out. A guard that cannot tell fails closed: the call now raises 22023 and says which
-- arguments are required. Both are redefined in their binding block, as schema/operations.sql
-- defines them.

-- Bound to the record schema of the store that first installed them, as the intents are: this
-- block sets search_path to their current binding, if any, while it creates them.
DO $install$
DECLARE
  v_bound  text;
  v_caller text := current_setting('search_path');
BEGIN
  -- The search_path an existing function is bound to, if there is one.
  SELECT substring(c FROM '^search_path=(.*)$') INTO v_bound
    FROM pg_proc p CROSS JOIN LATERAL unnest(p.proconfig) AS c
   WHERE p.oid = to_regprocedure(
           'idem.operation_complete(text, text, bigint, integer, jsonb, bytea, interval)')
     AND c LIKE 'search_path=%';
  PERFORM set_config('search_path', coalesce(v_bound, v_caller), true);

    -- Completes an accepted long-running operation with its final response, in the caller's
    -- transaction: retries of the request replay it for `keep`. False when `token` no longer
    -- owns the operation (its lease ran out and a retry took it over, or it was released or
    -- purged): a job that was taken over must not overwrite the new owner's result. A NULL
    -- tenant digest, key or token is 22023, never a false a job would read as "taken over".
    CREATE OR REPLACE FUNCTION idem.operation_complete(tenant_digest text, key text,
                                                       token bigint, status integer,
                                                       headers jsonb DEFAULT '[]',
                                                       body bytea DEFAULT '',
                                                       keep interval DEFAULT interval '24 hours')
    RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $body$
    DECLARE
      v_keep_ms bigint := floor(extract(epoch FROM keep) * 1000)::bigint;
    BEGIN
      IF tenant_digest IS NULL OR key IS NULL OR token IS NULL THEN
        RAISE EXCEPTION 'idem.operation_complete: tenant_digest, key and token are required'
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      IF v_keep_ms IS NULL OR v_keep_ms <= 0 THEN
        RAISE EXCEPTION 'idem.operation_complete: keep must be positive'
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      RETURN idem_complete(idem.operation_scope_id(tenant_digest, key), token,
                           idem.encode_response(status, headers, body), v_keep_ms, NULL);
    END $body$;

    -- Gives an accepted operation up after a transient failure: the next retry executes again.
    -- False when `token` no longer owns it; 22023 for a NULL tenant digest, key or token.
    CREATE OR REPLACE FUNCTION idem.operation_release(tenant_digest text, key text,
                                                      token bigint)
    RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $body$
    BEGIN
      IF tenant_digest IS NULL OR key IS NULL OR token IS NULL THEN
        RAISE EXCEPTION 'idem.operation_release: tenant_digest, key and token are required'
          USING ERRCODE = 'invalid_parameter_value';
      END IF;
      RETURN idem_release(idem.operation_scope_id(tenant_digest, key), token, NULL);
    END $body$;

  PERFORM set_config('search_path', v_caller, true);
END $install$;
