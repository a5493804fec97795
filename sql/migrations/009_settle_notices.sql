-- gateway: settle notices wake waiters on other gateways.
--
-- Version 9 of the PostgreSQL store's schema: settle notices (Store::Watch and
-- Store::SubscribeSettled). A waiter marks an in-flight record with idem_watch; the complete,
-- release or purge of a marked record then sends NOTIFY idem_settled with the key's digest as
-- payload, delivered to listeners when (and only if) that transaction commits. Unmarked records
-- notify nothing: a NOTIFY serialises the commits of the transactions that send one, a cost
-- only requests somebody waits for should pay. docs/postgresql.md explains the column.

ALTER TABLE idem_records ADD COLUMN IF NOT EXISTS waited boolean NOT NULL DEFAULT false;

-- The payload names the key as the gateway does (Scope::Digest): SHA-256 of tenant, client
-- and key joined by NUL bytes, in hex. (scope_id hashes another encoding.) textsend gives the
-- bytes the gateway sent and never fails, so a notice can never make its settle fail.
-- Nothing for a record nobody waits for.
CREATE OR REPLACE FUNCTION idem_notify_settled(
    p_waited boolean, p_tenant text, p_client text, p_key text)
RETURNS void LANGUAGE sql VOLATILE AS $$
  SELECT pg_notify('idem_settled', encode(sha256(textsend(p_tenant) || '\x00'::bytea ||
                                                 textsend(p_client) || '\x00'::bytea ||
                                                 textsend(p_key)), 'hex'))
   WHERE p_waited
$$;

-- Marks the live in-flight record of the scope as watched; false when there is none.
CREATE OR REPLACE FUNCTION idem_watch(p_scope_id bytea, p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
BEGIN
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  UPDATE idem_records r SET waited = true
   WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now AND r.state = 1 AND NOT r.waited;
  IF FOUND THEN RETURN true; END IF;
  RETURN EXISTS (SELECT 1 FROM idem_records r
                  WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now AND r.state = 1);
END $$;

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
      RETURNING r.waited, r.tenant, r.client, r.key INTO v_row;
      IF NOT FOUND THEN RETURN false; END IF;
      PERFORM idem_notify_settled(v_row.waited, v_row.tenant, v_row.client, v_row.key);
      RETURN true;
    EXCEPTION WHEN check_violation THEN
      IF v_retried OR NOT idem_ensure_partition(v_expires) THEN RAISE; END IF;
      v_retried := true;
    END;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION idem_release(p_scope_id bytea, p_token bigint, p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
  v_row record;
BEGIN
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  DELETE FROM idem_records r
   WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now AND r.state = 1
     AND r.token = p_token
  RETURNING r.waited, r.tenant, r.client, r.key INTO v_row;
  IF NOT FOUND THEN RETURN false; END IF;
  PERFORM idem_notify_settled(v_row.waited, v_row.tenant, v_row.client, v_row.key);
  RETURN true;
END $$;

CREATE OR REPLACE FUNCTION idem_purge(p_scope_id bytea, p_now bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now bigint;
  v_row record;
  v_found boolean := false;
BEGIN
  PERFORM idem_lock_scope(p_scope_id);
  v_now := idem_now(p_now);
  FOR v_row IN
    DELETE FROM idem_records r WHERE r.scope_id = p_scope_id AND r.expires_ms > v_now
    RETURNING r.waited, r.tenant, r.client, r.key
  LOOP
    v_found := true;
    PERFORM idem_notify_settled(v_row.waited, v_row.tenant, v_row.client, v_row.key);
  END LOOP;
  RETURN v_found;
END $$;
