// A payments service in Node.js on idem's SQL building blocks: node:http and `pg` from npm.
//
//   npm install
//   DATABASE_URL=postgresql://USER@HOST:PORT/DB LISTEN=127.0.0.1:8000 node payments_service.js
//
// Two endpoints, each one PostgreSQL transaction (`idem migrate` installs the idem.* functions):
//
//   POST /payments     {"account": "alice", "amount": 250}, behind `idem gateway` (which requires
//                      an Idempotency-Key): the payment row, its ledger entry and its outbox
//                      event commit together. 201 {"payment_id", "account", "amount", "event_id"}.
//   POST /settlements  a "payments.created" event, behind `idem consume` (Idempotency-Key = the
//                      message id): the inbox claim and the settlement commit together. 200.
//
// `idem relay` publishes the outbox to JetStream, and `idem consume` posts each message back to
// /settlements. In a real system the two halves are usually two services; they share one file
// here so that the whole loop fits on a page. docs/guides/any-language.md walks through it.
'use strict';

const http = require('node:http');
const { Pool } = require('pg');

// The service's own table. The idempotency key is unique: a retry that gets past the gateway
// (its record expired, or the request came in another way) finds the payment it made. With
// several callers, make the unique key (caller, key): the gateway scopes keys by caller too.
const SCHEMA = `
CREATE TABLE IF NOT EXISTS payments (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  idempotency_key text   NOT NULL UNIQUE,
  account         text   NOT NULL,
  amount          bigint NOT NULL CHECK (amount > 0)
)`;

// The consumer name of the inbox claims: one per consumer of the stream, so that two services
// reading the same events each apply them once.
const CONSUMER = 'settlement';

const pool = new Pool({
  connectionString: process.env.DATABASE_URL || 'postgresql://postgres@127.0.0.1:5432/payments',
  max: 8,
});

// Runs fn(client) inside BEGIN ... COMMIT; ROLLBACK if it throws.
async function inTransaction(fn) {
  const client = await pool.connect();
  let broken;
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch((e) => { broken = e; });
    throw error;
  } finally {
    client.release(broken); // a connection that could not roll back is closed, not reused
  }
}

// Derived from the payment, never generated per attempt: the outbox refuses a second event with
// this id, and JetStream drops a second publish of it (Nats-Msg-Id).
const eventId = (paymentId) => `payment:${paymentId}.created`;

// The producer: the payment, its ledger entry and its event, or none of them.
// Returns [status, answer].
function pay(key, account, amount) {
  return inTransaction(async (db) => {
    const inserted = await db.query(
      `INSERT INTO payments (idempotency_key, account, amount) VALUES ($1, $2, $3)
       ON CONFLICT (idempotency_key) DO NOTHING RETURNING id`, [key, account, amount]);
    if (inserted.rowCount === 0) {
      // Paid already under this key: answer that payment, write nothing.
      const { rows: [paid] } = await db.query(
        'SELECT id, account, amount FROM payments WHERE idempotency_key = $1', [key]);
      if (paid.account !== account || Number(paid.amount) !== amount) {
        return [422, { error: 'this Idempotency-Key was used for another payment' }];
      }
      const paymentId = Number(paid.id); // pg returns bigint as a string
      return [200, { payment_id: paymentId, account, amount, event_id: eventId(paymentId) }];
    }
    const paymentId = Number(inserted.rows[0].id);
    // The ledger entry, unique by its txn id (derived from the key): a balance can never count
    // this payment twice. The balance is idem.ledger_balance('wallet:' || account).
    await db.query('SELECT idem.ledger_append($1, $2, $3)',
      [`wallet:${account}`, `payment:${key}`, amount]);
    // The event, in the same transaction: it exists exactly when the payment does. The service
    // never publishes; `idem relay` does, after COMMIT. One account's events are published in
    // commit order (the ordering key).
    const event = { payment_id: paymentId, account, amount };
    await db.query(
      `SELECT idem.outbox_enqueue($1, 'payments.created', convert_to($2, 'UTF8'),
                                  '{"Content-Type": "application/json"}', $3)`,
      [eventId(paymentId), JSON.stringify(event), `account:${account}`]);
    return [201, { ...event, event_id: eventId(paymentId) }];
  });
}

// The consumer: the inbox claim and the effect, or neither. True if it applied.
function settle(messageId, event) {
  return inTransaction(async (db) => {
    // False: this message was applied before (its ack was lost, or the relay published it
    // twice after the stream's dedup window). Skip it; COMMIT of nothing is harmless.
    const { rows: [{ claimed }] } = await db.query(
      'SELECT idem.inbox_claim($1, $2) AS claimed', [CONSUMER, messageId]);
    if (!claimed) return false;
    // The state guard: 'already' if the payment was settled by another message (a replay under
    // a new message id); then nothing more is written.
    const payment = String(event.payment_id);
    const { rows: [{ moved }] } = await db.query(
      "SELECT idem.transition('payment', $1, 'settled', ARRAY['none']) AS moved", [payment]);
    if (moved === 'applied') {
      await db.query('SELECT idem.ledger_append($1, $2, $3)',
        [`settled:${event.account}`, `settle:${payment}`, event.amount]);
    }
    return true;
  });
}

const positive = (v) => Number.isSafeInteger(v) && v > 0;
const ROUTES = {
  '/payments': (key, p) => pay(key, p.account, p.amount),
  '/settlements': async (key, e) => {
    if (!positive(e.payment_id)) return [400, { error: 'payment_id must be a positive integer' }];
    const applied = await settle(key, e);
    log(applied ? `settled payment ${e.payment_id}`
      : `skipped message ${key}: already applied (inbox)`);
    return [200, { applied }];
  },
};

async function handle(req, body) {
  const route = ROUTES[req.url];
  const key = req.headers['idempotency-key'];
  if (req.method !== 'POST' || !route) return [404, { error: 'not found' }];
  if (!key) return [400, { error: 'Idempotency-Key is required' }];
  let p;
  try { p = JSON.parse(body); } catch { p = null; }
  if (typeof p?.account !== 'string' || p.account === '' || !positive(p.amount)) {
    // A 4xx is final: the gateway stores it, idem consume dead-letters the message.
    return [400, { error: 'expected {"account": "...", "amount": integer > 0}' }];
  }
  try {
    return await route(key, p);
  } catch (error) {
    if (/^(22|ID)/.test(error.code ?? '')) return [422, { error: error.message }]; // refused input
    // Anything else may pass: 503 makes the gateway release the key and idem consume redeliver
    // later. Both retries are safe: nothing of this attempt was committed.
    log(`database error: ${error.message}`);
    return [503, { error: 'database unavailable' }];
  }
}

function log(line) {
  console.error(`payments: ${line}`);
}

async function main() {
  await pool.query(SCHEMA);
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', async () => {
      const [status, answer] = await handle(req, Buffer.concat(chunks).toString());
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(answer));
    });
  });
  const [host, port] = (process.env.LISTEN || '127.0.0.1:8000').split(/:(?=\d+$)/);
  server.listen(Number(port), host, () => log(`listening on ${host}:${server.address().port}`));
}

main().catch((error) => {
  log(error.message);
  process.exit(1);
});
