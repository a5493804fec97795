-- gateway: a completion's settle notice carries its response.
--
-- Version 13: a completion's notice carries the response it stored, with the fingerprint of the
-- request it answers, when the three fit NOTIFY's 8000-byte payload (a response of up to 5,600
-- bytes as EncodeResponse writes it: 7,468 characters of base64). A subscriber then wakes its
-- waiters with the response instead of reading the record first (settle_notice.h has the
-- format; the digest still comes first, so a gateway that reads only the digest still works).
-- Releases and purges notify as in version 9.

CREATE OR REPLACE FUNCTION idem_notify_completed(
    p_waited boolean, p_tenant text, p_client text, p_key text, p_fingerprint bytea,
    p_response bytea)
RETURNS void LANGUAGE sql VOLATILE AS $$
  SELECT pg_notify('idem_settled',
           encode(sha256(textsend(p_tenant) || '\x00'::bytea || textsend(p_client) ||
                         '\x00'::bytea || textsend(p_key)), 'hex') ||
           CASE WHEN octet_length(p_response) <= 5600
                THEN ' ' || encode(p_fingerprint, 'hex') || ' ' || octet_length(p_response) ||
                     ' ' || translate(encode(p_response, 'base64'), E'\n', '')
                ELSE '' END)
   WHERE p_waited
$$;

CREATE OR REPLACE FUNCTION idem_complete(
    p_scope_id bytea, p_token bigint, p_response bytea, p_ttl_ms bigint, p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
  v_expires bigint;
  v_row record;
  v_retried boolean := false;
BEGIN
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  v_expires := v_now + p_ttl_ms;
  LOOP
    BEGIN
      UPDATE idem_records r SET state = 2, expires_ms = v_expires, response = p_response
       WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now AND r.state = 1
         AND r.token = p_token
      RETURNING r.waited, r.tenant, r.client, r.key, r.fingerprint INTO v_row;
      IF NOT FOUND THEN RETURN false; END IF;
      PERFORM idem_notify_completed(v_row.waited, v_row.tenant, v_row.client, v_row.key,
                                    v_row.fingerprint, p_response);
      RETURN true;
    EXCEPTION WHEN check_violation THEN
      IF v_retried OR NOT idem_ensure_partition(v_expires) THEN RAISE; END IF;
      v_retried := true;
    END;
  END LOOP;
END $$;
