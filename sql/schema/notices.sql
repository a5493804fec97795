-- Settle notices: a gateway waiting for an in-flight key (Prefer: wait, or a duplicate that
-- waits) is woken when another gateway settles it, through NOTIFY idem_settled.
--
-- In the store's schema, like records.sql. A waiter marks the in-flight record with
-- idem_watch; the completion, release or purge of a marked record then notifies, and
-- listeners get the notice when (and only if) that transaction commits. Unmarked records
-- notify nothing: a NOTIFY serialises the commits of the transactions that send one, a cost
-- only requests somebody waits for should pay. The payload starts with the key's digest
-- (Scope::Digest: SHA-256 of tenant, client and key joined by NUL bytes, in hex);
-- src/store/settle_notice.h has the format.

-- The notice of a release or purge: the key's digest. textsend gives the bytes the gateway
-- sent and never fails, so a notice can never make its settle fail. Nothing for a record
-- nobody waits for.
CREATE OR REPLACE FUNCTION idem_notify_settled(
    p_waited boolean, p_tenant text, p_client text, p_key text)
RETURNS void LANGUAGE sql VOLATILE AS $$
  SELECT pg_notify('idem_settled', encode(sha256(textsend(p_tenant) || '\x00'::bytea ||
                                                 textsend(p_client) || '\x00'::bytea ||
                                                 textsend(p_key)), 'hex'))
   WHERE p_waited
$$;

-- The notice of a completion: the key's digest, then, when they fit NOTIFY's 8000-byte
-- payload (a response of up to 5,600 bytes), the request's fingerprint, the response's length
-- and the response in base64, so that a subscriber wakes its waiters with the response
-- instead of reading the record. Nothing for a record nobody waits for.
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

-- Marks the scope's live in-flight record as watched; false when there is none (the waiter's
-- next read finds the settled record). Takes no scope lock: the UPDATE's row lock orders the
-- mark against the completion it races, so a burst of waiters does not queue on the lock
-- their completion needs. Losing that race (the completion moved the row to another
-- partition: SQLSTATE 40001) also answers false.
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
