// Command payments is a payments service in Go on idem's SQL building blocks: database/sql
// with github.com/lib/pq, and net/http.
//
//	DATABASE_URL='postgresql://USER@HOST:PORT/DB?sslmode=disable' LISTEN=127.0.0.1:8000 ./payments
//
// Two endpoints, each one PostgreSQL transaction (`idem migrate` installs the idem.* functions):
//
//	POST /payments     {"account": "alice", "amount": 250}, behind `idem gateway` (which
//	                   requires an Idempotency-Key): the payment row, its ledger entry and its
//	                   outbox event commit together. 201 {"payment_id", "account", "amount",
//	                   "event_id"}.
//	POST /settlements  a "payments.created" event, behind `idem consume` (Idempotency-Key = the
//	                   message id): the inbox claim and the settlement commit together. 200.
//
// `idem relay` publishes the outbox to JetStream, and `idem consume` posts each message back
// to /settlements. In a real system the two halves are usually two services; they share one
// file here so that the whole loop fits on a page. docs/guides/any-language.md walks through it.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/lib/pq"
)

// The service's own table. The idempotency key is unique: a retry that gets past the gateway
// (its record expired, or the request came in another way) finds the payment it made. With
// several callers, make the unique key (caller, key): the gateway scopes keys by caller too.
const schema = `
CREATE TABLE IF NOT EXISTS payments (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  idempotency_key text   NOT NULL UNIQUE,
  account         text   NOT NULL,
  amount          bigint NOT NULL CHECK (amount > 0)
)`

// The consumer name of the inbox claims: one per consumer of the stream, so that two services
// reading the same events each apply them once.
const consumer = "settlement"

// Payment is the request, the response and the event.
type Payment struct {
	PaymentID int64  `json:"payment_id"`
	Account   string `json:"account"`
	Amount    int64  `json:"amount"`
	EventID   string `json:"event_id,omitempty"`
}

var db *sql.DB

// inTx runs fn inside BEGIN ... COMMIT; ROLLBACK if it returns an error.
func inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// eventID is derived from the payment, never generated per attempt: the outbox refuses a second
// event with this id, and JetStream drops a second publish of it (Nats-Msg-Id).
func eventID(paymentID int64) string { return fmt.Sprintf("payment:%d.created", paymentID) }

var errKeyReused = errors.New("this Idempotency-Key was used for another payment")

// pay is the producer: the payment, its ledger entry and its event, or none of them. It
// answers 201 for a new payment, 200 for one already made under this key.
func pay(ctx context.Context, key string, p Payment) (int, Payment, error) {
	status := http.StatusCreated
	err := inTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `INSERT INTO payments (idempotency_key, account, amount)
			VALUES ($1, $2, $3) ON CONFLICT (idempotency_key) DO NOTHING RETURNING id`,
			key, p.Account, p.Amount).Scan(&p.PaymentID)
		if errors.Is(err, sql.ErrNoRows) {
			// Paid already under this key: answer that payment, write nothing.
			status = http.StatusOK
			var paid Payment
			err = tx.QueryRowContext(ctx, `SELECT id, account, amount FROM payments
				WHERE idempotency_key = $1`, key).Scan(&paid.PaymentID, &paid.Account, &paid.Amount)
			if err == nil && (paid.Account != p.Account || paid.Amount != p.Amount) {
				return errKeyReused
			}
			p = paid
			return err
		}
		if err != nil {
			return err
		}
		// The ledger entry, unique by its txn id (derived from the key): a balance can never
		// count this payment twice. The balance is idem.ledger_balance('wallet:' || account).
		if _, err := tx.ExecContext(ctx, `SELECT idem.ledger_append($1, $2, $3)`,
			"wallet:"+p.Account, "payment:"+key, p.Amount); err != nil {
			return err
		}
		// The event, in the same transaction: it exists exactly when the payment does. The
		// service never publishes; `idem relay` does, after COMMIT. One account's events are
		// published in commit order (the ordering key).
		event, _ := json.Marshal(p)
		_, err = tx.ExecContext(ctx, `SELECT idem.outbox_enqueue($1, 'payments.created',
			convert_to($2, 'UTF8'), '{"Content-Type": "application/json"}', $3)`,
			eventID(p.PaymentID), string(event), "account:"+p.Account)
		return err
	})
	p.EventID = eventID(p.PaymentID)
	return status, p, err
}

// settle is the consumer: the inbox claim and the effect, or neither. True if it applied.
func settle(ctx context.Context, messageID string, e Payment) (applied bool, err error) {
	err = inTx(ctx, func(tx *sql.Tx) error {
		// False: this message was applied before (its ack was lost, or the relay published it
		// twice after the stream's dedup window). Skip it; COMMIT of nothing is harmless.
		if err := tx.QueryRowContext(ctx, `SELECT idem.inbox_claim($1, $2)`,
			consumer, messageID).Scan(&applied); err != nil || !applied {
			return err
		}
		// The state guard: 'already' if the payment was settled by another message (a replay
		// under a new message id); then nothing more is written.
		payment := fmt.Sprint(e.PaymentID)
		var moved string
		if err := tx.QueryRowContext(ctx, `SELECT idem.transition('payment', $1, 'settled',
			ARRAY['none'])`, payment).Scan(&moved); err != nil || moved != "applied" {
			return err
		}
		_, err := tx.ExecContext(ctx, `SELECT idem.ledger_append($1, $2, $3)`,
			"settled:"+e.Account, "settle:"+payment, e.Amount)
		return err
	})
	return applied, err
}

// handle decodes a Payment, runs fn, and maps its error to a status.
func handle(needID bool, fn func(*http.Request, string, Payment) (int, any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		var p Payment
		switch {
		case r.Method != http.MethodPost:
			reply(w, http.StatusMethodNotAllowed, map[string]string{"error": "POST only"})
		case key == "":
			reply(w, http.StatusBadRequest, map[string]string{"error": "Idempotency-Key is required"})
		case json.NewDecoder(r.Body).Decode(&p) != nil || p.Account == "" || p.Amount <= 0 ||
			(needID && p.PaymentID <= 0):
			// A 4xx is final: the gateway stores it, idem consume dead-letters the message.
			reply(w, http.StatusBadRequest, map[string]string{"error": "expected a JSON payment"})
		default:
			status, answer, err := fn(r, key, p)
			var pqErr *pq.Error
			switch {
			case errors.Is(err, errKeyReused):
				reply(w, http.StatusUnprocessableEntity, map[string]string{"error": err.Error()})
			case errors.As(err, &pqErr) && (pqErr.Code.Class() == "22" || pqErr.Code[:2] == "ID"):
				// Input idem's functions refuse (too long an account, ...).
				reply(w, http.StatusUnprocessableEntity, map[string]string{"error": pqErr.Message})
			case err != nil:
				// Anything else may pass: 503 makes the gateway release the key and idem consume
				// redeliver later. Both retries are safe: nothing of this attempt was committed.
				log.Printf("database error: %v", err)
				reply(w, http.StatusServiceUnavailable, map[string]string{"error": "database unavailable"})
			default:
				reply(w, status, answer)
			}
		}
	}
}

func reply(w http.ResponseWriter, status int, answer any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(answer)
}

func getenv(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func main() {
	log.SetPrefix("payments: ")
	var err error
	db, err = sql.Open("postgres", getenv("DATABASE_URL",
		"postgresql://postgres@127.0.0.1:5432/payments?sslmode=disable"))
	if err != nil {
		log.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	if _, err := db.Exec(schema); err != nil {
		log.Fatal(err)
	}

	http.HandleFunc("/payments", handle(false, func(r *http.Request, key string, p Payment) (int, any, error) {
		return pay(r.Context(), key, p)
	}))
	http.HandleFunc("/settlements", handle(true, func(r *http.Request, key string, e Payment) (int, any, error) {
		applied, err := settle(r.Context(), key, e)
		if err == nil && applied {
			log.Printf("settled payment %d", e.PaymentID)
		} else if err == nil {
			log.Printf("skipped message %s: already applied (inbox)", key)
		}
		return http.StatusOK, map[string]bool{"applied": applied}, err
	}))

	listener, err := net.Listen("tcp", getenv("LISTEN", "127.0.0.1:8000"))
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("listening on %s", listener.Addr())
	log.Fatal(http.Serve(listener, nil))
}
