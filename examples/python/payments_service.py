#!/usr/bin/env python3
"""A payments service in Python on idem's SQL building blocks: psycopg2 and http.server only.

    DATABASE_URL=postgresql://USER@HOST:PORT/DB LISTEN=127.0.0.1:8000 python3 payments_service.py

Two endpoints, each one PostgreSQL transaction (`idem migrate` installs the idem.* functions):

  POST /payments      {"account": "alice", "amount": 250}, behind `idem gateway` (which requires
                      an Idempotency-Key): the payment row, its ledger entry and its outbox event
                      commit together. 201 {"payment_id", "account", "amount", "event_id"}.
  POST /settlements   a "payments.created" event, behind `idem consume` (Idempotency-Key = the
                      message id): the inbox claim and the settlement commit together. 200.

`idem relay` publishes the outbox to JetStream, and `idem consume` posts each message back to
/settlements. In a real system the two halves are usually two services; they share one file
here so that the whole loop fits on a page. docs/guides/any-language.md walks through it.
"""
import json
import os
import sys
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg2
from psycopg2.pool import ThreadedConnectionPool

# The service's own table. The idempotency key is unique: a retry that gets past the gateway
# (its record expired, or the request came in another way) finds the payment it made. With
# several callers, make the unique key (caller, key): the gateway scopes keys by caller too.
SCHEMA = """
CREATE TABLE IF NOT EXISTS payments (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  idempotency_key text   NOT NULL UNIQUE,
  account         text   NOT NULL,
  amount          bigint NOT NULL CHECK (amount > 0)
)"""

# The consumer name of the inbox claims: one per consumer of the stream, so that two services
# reading the same events each apply them once.
CONSUMER = "settlement"

MAX_CONNECTIONS = 8
pool = None  # set in main()
slots = threading.BoundedSemaphore(MAX_CONNECTIONS)  # getconn() raises rather than waits


@contextmanager
def transaction():
    """A cursor inside BEGIN ... COMMIT; ROLLBACK if the block raises."""
    with slots:
        conn = pool.getconn()
        try:
            with conn:  # psycopg2: COMMIT when the block ends, ROLLBACK on an exception
                with conn.cursor() as cur:
                    yield cur
        finally:
            pool.putconn(conn, close=bool(conn.closed))


def event_id(payment_id):
    # Derived from the payment, never generated per attempt: the outbox refuses a second event
    # with this id, and JetStream drops a second publish of it (Nats-Msg-Id).
    return "payment:%d.created" % payment_id


def pay(key, account, amount):
    """The producer: the payment, its ledger entry and its event, or none of them."""
    with transaction() as cur:
        cur.execute(
            "INSERT INTO payments (idempotency_key, account, amount) VALUES (%s, %s, %s) "
            "ON CONFLICT (idempotency_key) DO NOTHING RETURNING id",
            (key, account, amount))
        row = cur.fetchone()
        if row is None:
            # Paid already under this key: answer that payment, write nothing.
            cur.execute("SELECT id, account, amount FROM payments WHERE idempotency_key = %s",
                        (key,))
            payment_id, paid_account, paid_amount = cur.fetchone()
            if (paid_account, paid_amount) != (account, amount):
                return 422, {"error": "this Idempotency-Key was used for another payment"}
            return 200, {"payment_id": payment_id, "account": account, "amount": amount,
                         "event_id": event_id(payment_id)}
        payment_id = row[0]
        # The ledger entry, unique by its txn id (derived from the key): a balance can never
        # count this payment twice. The balance is idem.ledger_balance('wallet:' || account).
        cur.execute("SELECT idem.ledger_append(%s, %s, %s)",
                    ("wallet:" + account, "payment:" + key, amount))
        # The event, in the same transaction: it exists exactly when the payment does. The
        # service never publishes; `idem relay` does, after COMMIT. One account's events are
        # published in commit order (the ordering key).
        event = {"payment_id": payment_id, "account": account, "amount": amount}
        cur.execute(
            "SELECT idem.outbox_enqueue(%s, 'payments.created', convert_to(%s, 'UTF8'), "
            "'{\"Content-Type\": \"application/json\"}', %s)",
            (event_id(payment_id), json.dumps(event), "account:" + account))
    return 201, dict(event, event_id=event_id(payment_id))


def settle(message_id, event):
    """The consumer: the inbox claim and the effect, or neither. True if it applied."""
    with transaction() as cur:
        # False: this message was applied before (its ack was lost, or the relay published it
        # twice after the stream's dedup window). Skip it; COMMIT of nothing is harmless.
        cur.execute("SELECT idem.inbox_claim(%s, %s)", (CONSUMER, message_id))
        if not cur.fetchone()[0]:
            return False
        # The state guard: 'already' if the payment was settled by another message (a replay
        # under a new message id); then nothing more is written.
        payment = str(event["payment_id"])
        cur.execute("SELECT idem.transition('payment', %s, 'settled', ARRAY['none'])", (payment,))
        if cur.fetchone()[0] == "applied":
            cur.execute("SELECT idem.ledger_append(%s, %s, %s)",
                        ("settled:" + event["account"], "settle:" + payment, event["amount"]))
    return True


def parse(body, fields):
    """The JSON object in body if it has every field, each a valid value; else None."""
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, dict) or not all(valid(value.get(f), f) for f in fields):
        return None
    return value


def valid(value, field):
    if field == "account":
        return isinstance(value, str) and value != ""
    return type(value) is int and value > 0  # amount, payment_id


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the gateway and idem consume reuse connections

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = self.headers.get("Idempotency-Key")
        fields = {"/payments": ("account", "amount"),
                  "/settlements": ("payment_id", "account", "amount")}.get(self.path)
        if fields is None:
            return self.reply(404, {"error": "not found"})
        if not key:
            return self.reply(400, {"error": "Idempotency-Key is required"})
        request = parse(body, fields)
        if request is None:
            # A 4xx is final: the gateway stores it, idem consume dead-letters the message.
            return self.reply(400, {"error": "expected a JSON object with " + ", ".join(fields)})
        try:
            if self.path == "/payments":
                return self.reply(*pay(key, request["account"], request["amount"]))
            applied = settle(key, request)
            log("settled payment %d" % request["payment_id"] if applied else
                "skipped message %s: already applied (inbox)" % key)
            return self.reply(200, {"applied": applied})
        except psycopg2.Error as e:
            if e.pgcode and e.pgcode[:2] in ("22", "ID"):  # input idem's functions refuse
                return self.reply(422, {"error": e.pgerror})
            # Anything else may pass: 503 makes the gateway release the key and idem consume
            # redeliver later. Both retries are safe: nothing of this attempt was committed.
            log("database error: %s" % e)
            return self.reply(503, {"error": "database unavailable"})

    def reply(self, status, answer):
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # no line per request
        pass


def log(line):
    print("payments: " + line, file=sys.stderr, flush=True)


def main():
    global pool
    url = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/payments")
    host, port = os.environ.get("LISTEN", "127.0.0.1:8000").rsplit(":", 1)
    pool = ThreadedConnectionPool(1, MAX_CONNECTIONS, url)
    with transaction() as cur:
        cur.execute(SCHEMA)
    server = ThreadingHTTPServer((host, int(port)), Handler)
    log("listening on %s:%d" % server.server_address[:2])
    server.serve_forever()


if __name__ == "__main__":
    main()
