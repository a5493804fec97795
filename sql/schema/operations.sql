-- Long-running operations completed from a job: the gateway answers a request with an accepted
-- response (a 202, Store::Accept: idem_accept in records.sql) and keeps its record in flight;
-- the job that does the work ends the operation from its own transaction, addressing the
-- record as the gateway's admin API does: tenant digest and key. docs/postgresql.md explains
-- both.
--
-- In the fixed schema `idem`, like the worker layer; idem.operation_complete and
-- idem.operation_release wrap the record functions, and are bound to a store schema as the
-- intents are (worker.sql).

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
-- [name, value] pairs, kept in order. 22023 for a status outside 100 to 999 or headers that
-- are not such an array.
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
