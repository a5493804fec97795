// The Store calls of the SQLite store: the fast path of Begin on a reader, and every write
// queued to the group commit (sqlite_write_batches.cc runs the batches).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "core/record_machine.h"
#include "core/response_codec.h"
#include "core/store_checks.h"
#include "core/wait_for_done.h"
#include "store/sqlite/sqlite_record_statements.h"
#include "store/sqlite/sqlite_store_impl.h"

namespace idem::internal::sqlite {

Result<BeginOutcome> SqliteStore::Begin(const Scope& scope, const Fingerprint& fingerprint,
                                        Duration lease) {
  IDEM_RETURN_IF_ERROR(internal::CheckLease(lease));
  if (auto cached = FromReplayCache(scope, fingerprint)) return std::move(*cached);
  // A caller that may block reads on a reader first, without the write lock: replays,
  // conflicts and mismatches only read, and a batch being committed does not hold them up.
  // The reader goes back before the write is queued.
  const uint64_t generation = replay_cache_.generation();  // before the read (Insert)
  Result<Decided> read = [&] {
    auto reader = readers_.Acquire();
    return ReadAndDecide(reader->select, reader->db, scope, fingerprint, options_.clock->Now());
  }();
  if (!read.ok()) return read.status().WithContext("begin scope " + scope.Digest());
  if (read->outcome) {
    if (const auto* replay = std::get_if<Replay>(&*read->outcome)) {
      replay_cache_.Insert(generation, scope, *read->head, replay->response);
    }
    return std::move(*read->outcome);
  }
  return internal::WaitForDone<BeginOutcome>([&](Done<BeginOutcome> done) {
    SubmitBeginWrite(scope, fingerprint, lease, std::move(done));
  });
}
Result<CompleteOutcome> SqliteStore::Complete(const Scope& scope, FencingToken token,
                                              const StoredResponse& response, Duration ttl) {
  return internal::WaitForDone<CompleteOutcome>([&](Done<CompleteOutcome> done) {
    SubmitComplete(scope, token, response, ttl, std::move(done));
  });
}

Result<ReleaseOutcome> SqliteStore::Release(const Scope& scope, FencingToken token) {
  return internal::WaitForDone<ReleaseOutcome>(
      [&](Done<ReleaseOutcome> done) { SubmitRelease(scope, token, std::move(done)); });
}

void SqliteStore::SubmitBegin(const Scope& scope, const Fingerprint& fingerprint,
                              Duration lease, Done<BeginOutcome> done) {
  if (Status s = internal::CheckLease(lease); !s.ok()) return done(s);
  if (auto cached = FromReplayCache(scope, fingerprint)) return done(std::move(*cached));
  SubmitBeginWrite(scope, fingerprint, lease, std::move(done));
}

void SqliteStore::SubmitBeginWrite(const Scope& scope, const Fingerprint& fingerprint,
                                   Duration lease, Done<BeginOutcome> done) {
  // Decided inside the write transaction: another caller, or another process sharing the
  // file, may have written since any earlier look.
  // The scope is copied once, shared by the write and its answer.
  struct Written {
    Scope scope;
    Result<BeginOutcome> outcome = InternalError("begin did not run");
    BeginRead read;
    uint64_t generation = 0;  // the replay cache's, before the read (Insert)
  };
  auto written = std::make_shared<Written>(Written{scope});
  writes_.Submit(
      [this, fingerprint, lease, written]() -> Status {
        mu_.AssertHeld();  // every write body runs in RunBatch, under ConnectionLock
        written->generation = replay_cache_.generation();
        written->outcome = BeginLocked(written->scope, fingerprint, lease,
                                       options_.clock->Now(), &written->read);
        return written->outcome.ok() ? Status::Ok() : written->outcome.status();
      },
      [this, written, done = std::move(done)](Status committed) {
        const Scope& scope = written->scope;
        if (written->read.replaced) replay_cache_.Erase(scope);
        if (!committed.ok()) return done(committed.WithContext("begin scope " + scope.Digest()));
        // A replay read in the batch is kept once committed: what it read is then in the file
        // (an earlier write of the same batch may have been what it read).
        if (written->read.replayed) {
          if (const auto* replay = std::get_if<Replay>(&*written->outcome)) {
            replay_cache_.Insert(written->generation, scope, *written->read.replayed,
                                 replay->response);
          }
        }
        done(std::move(written->outcome));
      },
      // Its one change is the insert or takeover: a fencing reservation written before an
      // insert that fails may stay (tokens above it are still issued in increasing order),
      // so no savepoint is needed.
      /*one_statement=*/true);
}

std::optional<Result<BeginOutcome>> SqliteStore::BeginAtOnce(const Scope& scope,
                                                             const Fingerprint& fingerprint,
                                                             Duration lease) {
  if (Status s = internal::CheckLease(lease); !s.ok()) return Result<BeginOutcome>(s);
  std::optional<BeginOutcome> cached = FromReplayCache(scope, fingerprint);
  if (!cached) return std::nullopt;
  begins_at_once_.fetch_add(1, std::memory_order_relaxed);
  return Result<BeginOutcome>(std::move(*cached));
}

std::shared_ptr<const StoredResponse> SqliteStore::ReplayShared(const Scope& scope,
                                                                const Fingerprint& fingerprint) {
  if (!replay_cache_.enabled()) return nullptr;
  uint64_t generation = 0;
  std::shared_ptr<const StoredResponse> hit =
      replay_cache_.LookupReplay(scope, fingerprint, options_.clock->Now(), &generation);
  // As in FromReplayCache: the entry first, then the look for other writers.
  if (!hit || !NoOtherWriterSinceLastLook() || replay_cache_.generation() != generation) {
    return nullptr;
  }
  replay_cache_hits_.fetch_add(1, std::memory_order_relaxed);
  begins_at_once_.fetch_add(1, std::memory_order_relaxed);
  return hit;
}

std::optional<BeginOutcome> SqliteStore::FromReplayCache(const Scope& scope,
                                                         const Fingerprint& fingerprint) {
  if (!replay_cache_.enabled() || replay_cache_.empty()) return std::nullopt;
  // The entry first, so that a key the cache does not hold (a first execution) costs no look
  // at the file.
  const uint64_t generation = replay_cache_.generation();
  std::optional<BeginOutcome> hit =
      replay_cache_.Lookup(scope, fingerprint, options_.clock->Now());
  if (!hit) return std::nullopt;
  // Then whether another connection wrote since the last look. If one did, this look or
  // another thread's cleared the cache, perhaps after the Lookup, and the hit may be what
  // the write replaced: the generation tells, and the file answers instead.
  if (!NoOtherWriterSinceLastLook() || replay_cache_.generation() != generation) {
    return std::nullopt;
  }
  replay_cache_hits_.fetch_add(1, std::memory_order_relaxed);
  return hit;
}

bool SqliteStore::NoOtherWriterSinceLastLook() {
  // Not ConnectionLock: a replay never waits for a batch's commit (it reads the file instead),
  // and PRAGMA data_version runs through a Use, so it leaves the connection idle.
  if (!mu_.TryLock()) {
    replay_cache_busy_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // Read before the pragma: if the header still reads the same at a later look, no commit
  // landed after this moment, and the pragma below accounts for every commit before it.
  const std::optional<WalIndexHeader::Snapshot> header = wal_index_.Read();
  if (header && header == header_seen_) {
    mu_.Unlock();
    return true;
  }
  // The pragma opens a read transaction, which SQLite may find locked for a moment (another
  // process recovering the WAL index, say): then it answers SQLITE_BUSY at once, without the
  // busy handler's wait, and the file answers this Begin.
  sqlite3_busy_handler(db_, nullptr, nullptr);
  other_writer_looks_.fetch_add(1, std::memory_order_relaxed);
  auto version = QueryInt(data_version_, db_, "data version");
  sqlite3_busy_timeout(db_, static_cast<int>(sqlite_.busy_timeout.count()));
  const bool unchanged = version.ok() && *version == data_version_seen_;
  if (version.ok() && !unchanged) {
    // Cleared while the connection is held, so that no later look can see the new version
    // before the entries read before it are gone.
    replay_cache_.Clear();
    data_version_seen_ = *version;
    other_writers_seen_.fetch_add(1, std::memory_order_relaxed);
  }
  header_seen_ = version.ok() ? header : std::nullopt;
  mu_.Unlock();
  if (!version.ok()) replay_cache_busy_.fetch_add(1, std::memory_order_relaxed);
  return unchanged;
}

namespace {

// Queues a write whose one statement changes the scope's row only while `token` still holds it
// (`exec(scope)` returns the rows changed): `done` gets `held` if it changed one, `fenced` if
// none. `exec` is a template parameter, not a std::function, so that the write costs one
// closure; the scope is copied once, shared by the write and its answer, and its digest is
// made only for an error.
template <typename Outcome, typename Exec>
void SubmitFencedWrite(GroupCommit& writes, const Scope& scope, Exec exec, Outcome held,
                       Outcome fenced, WriteQueue::Done<Outcome> done) {
  struct Fenced {
    Scope scope;
    Outcome outcome;
  };
  auto fenced_write = std::make_shared<Fenced>(Fenced{scope, fenced});
  writes.Submit(
      [exec = std::move(exec), fenced_write, held]() -> Status {
        auto changed = exec(fenced_write->scope);
        if (!changed.ok()) return changed.status();
        if (*changed == 1) fenced_write->outcome = held;
        return Status::Ok();
      },
      [fenced_write, done = std::move(done)](Status written) {
        if (!written.ok()) {
          return done(written.WithContext("scope " + fenced_write->scope.Digest()));
        }
        done(fenced_write->outcome);
      },
      /*one_statement=*/true);
}

}  // namespace

void SqliteStore::SubmitComplete(const Scope& scope, FencingToken token,
                                 const StoredResponse& response, Duration ttl,
                                 Done<CompleteOutcome> done) {
  if (Status s = internal::CheckTtl(ttl); !s.ok()) return done(s);
  SubmitFencedWrite<CompleteOutcome>(
      writes_, scope,
      [this, token, status = response.status,
       headers = internal::EncodeHeaders(response.headers), body = response.body,
       ttl](const Scope& scope) -> Result<int> {
        mu_.AssertHeld();  // every write body runs in RunBatch, under ConnectionLock
        const TimePoint now = options_.clock->Now();
        Use use(complete_, db_);
        BindScope(use, scope)
            .Int(4, static_cast<int64_t>(token))
            .Int(5, ToMillis(now + ttl))
            .Int(6, status)
            .Blob(7, headers)
            .Blob(8, body)
            .Int(9, ToMillis(now));
        return use.Exec("complete");
      },
      CompleteOutcome::kOk, CompleteOutcome::kFenced, std::move(done));
}

void SqliteStore::SubmitRelease(const Scope& scope, FencingToken token,
                                Done<ReleaseOutcome> done) {
  SubmitFencedWrite<ReleaseOutcome>(
      writes_, scope,
      [this, token](const Scope& scope) -> Result<int> {
        mu_.AssertHeld();  // every write body runs in RunBatch, under ConnectionLock
        Use use(release_, db_);
        BindScope(use, scope)
            .Int(4, static_cast<int64_t>(token))
            .Int(5, ToMillis(options_.clock->Now()));
        return use.Exec("release");
      },
      ReleaseOutcome::kReleased, ReleaseOutcome::kFenced, std::move(done));
}

Result<CompleteOutcome> SqliteStore::Accept(const Scope& scope, FencingToken token,
                                            const StoredResponse& accepted, Duration lease) {
  IDEM_RETURN_IF_ERROR(internal::CheckLease(lease));
  const std::string headers = internal::EncodeHeaders(accepted.headers);
  CompleteOutcome outcome = CompleteOutcome::kFenced;
  Status written = writes_.Write([&]() -> Status {
    mu_.AssertHeld();  // every write body runs in RunBatch, under ConnectionLock
    const TimePoint now = options_.clock->Now();
    const TimePoint deadline = now + lease;
    Use use(accept_, db_);
    BindScope(use, scope)
        .Int(4, static_cast<int64_t>(token))
        .Int(5, ToMillis(deadline))
        .Int(6, ToMillis(internal::InFlightExpiry(deadline, options_)))
        .Int(7, accepted.status)
        .Blob(8, headers)
        .Blob(9, accepted.body)
        .Int(10, ToMillis(now));
    auto changed = use.Exec("accept");
    if (!changed.ok()) return changed.status();
    outcome = *changed == 1 ? CompleteOutcome::kOk : CompleteOutcome::kFenced;
    return Status::Ok();
  });
  if (!written.ok()) return written.WithContext("accept scope " + scope.Digest());
  return outcome;
}

Result<std::optional<Record>> SqliteStore::Get(const Scope& scope) {
  IDEM_RETURN_IF_ERROR(CheckFile());  // Get is the gateway's readiness probe
  auto reader = readers_.Acquire();
  const TimePoint now = options_.clock->Now();
  Use use(reader->select, reader->db);
  BindScope(use, scope);
  auto row = use.Step("get");
  if (!row.ok()) return row.status().WithContext("scope " + scope.Digest());
  if (!*row) return std::optional<Record>();
  auto head = ReadHead(use);
  if (!head.ok()) return head.status().WithContext("get scope " + scope.Digest());
  if (!internal::IsLive(*head, now)) return std::optional<Record>();
  Record record;
  record.scope = scope;
  record.fingerprint = head->fingerprint;
  record.state = head->state;
  record.token = head->token;
  record.lease_deadline = head->lease_deadline;
  record.expires_at = head->expires_at;
  record.created_at = FromMillis(use.ColumnInt(column::kCreated));
  if (head->state == RecordState::kCompleted || !use.ColumnNull(column::kStatus)) {
    auto response = ReadResponse(use, column::kStatus);
    if (!response.ok()) return response.status().WithContext("get scope " + scope.Digest());
    (head->state == RecordState::kCompleted ? record.response : record.accepted) =
        std::move(*response);
  }
  return std::optional<Record>(std::move(record));
}

Result<bool> SqliteStore::Purge(const Scope& scope) {
  bool live = false;
  Status written = writes_.Write([&]() -> Status {
    mu_.AssertHeld();  // every write body runs in RunBatch, under ConnectionLock
    Use use(purge_, db_);
    BindScope(use, scope);
    auto row = use.Step("purge");
    if (!row.ok()) return row.status();
    if (!*row) return Status::Ok();
    live = options_.clock->Now() < FromMillis(use.ColumnInt(0));  // RETURNING expires_ms
    auto done = use.Step("purge");  // finish the statement so the delete takes effect
    return done.ok() ? Status::Ok() : done.status();
  });
  replay_cache_.Erase(scope);  // committed or not, the cache must not outlive the row
  if (!written.ok()) return written.WithContext("scope " + scope.Digest());
  return live;
}

Result<uint64_t> SqliteStore::Sweep(TimePoint now) {
  IDEM_RETURN_IF_ERROR(CheckFile());
  Result<uint64_t> removed = SweepBatches(now);
  replay_cache_.EraseExpired(now);  // what the batches deleted, even if one failed
  return removed;
}

Result<uint64_t> SqliteStore::SweepBatches(TimePoint now) {
  uint64_t removed = 0;
  const int batch = std::max(1, sqlite_.sweep_batch);
  for (;;) {
    // The lock is retaken per batch so Begin calls interleave with a long sweep.
    ConnectionLock lock(*this);
    Use use(sweep_, db_);
    use.Int(1, ToMillis(now)).Int(2, batch);
    auto changed = use.Exec("sweep");
    if (!changed.ok()) return changed.status();
    removed += static_cast<uint64_t>(*changed);
    if (*changed < batch) return removed;
  }
}

Result<BeginOutcome> SqliteStore::BeginLocked(const Scope& scope, const Fingerprint& fingerprint,
                                              Duration lease, TimePoint now, BeginRead* read) {
  auto decided = ReadAndDecide(select_record_, db_, scope, fingerprint, now);
  if (!decided.ok()) return decided.status();
  if (decided->outcome) {
    if (std::holds_alternative<Replay>(*decided->outcome)) read->replayed = decided->head;
    return std::move(*decided->outcome);
  }
  read->replaced = decided->head.has_value();

  auto token = fence_.Next();
  if (!token.ok()) return token.status();
  const TimePoint deadline = now + lease;
  const TimePoint expires = internal::InFlightExpiry(deadline, options_);
  if (decided->action == BeginAction::kTakeOver) {
    Use use(take_over_, db_);
    BindScope(use, scope)
        .Int(4, static_cast<int64_t>(*token))
        .Int(5, ToMillis(deadline))
        .Int(6, ToMillis(expires));
    auto changed = use.Exec("take over");
    if (!changed.ok()) return changed.status();
    return BeginOutcome(TakenOver{*token, decided->previous_token});
  }
  Use use(insert_in_flight_, db_);
  BindScope(use, scope)
      .Blob(4, fingerprint.raw())
      .Int(5, static_cast<int64_t>(*token))
      .Int(6, ToMillis(deadline))
      .Int(7, ToMillis(now))
      .Int(8, ToMillis(expires));
  auto changed = use.Exec("insert");
  if (!changed.ok()) return changed.status();
  return BeginOutcome(Acquired{*token});
}


}  // namespace idem::internal::sqlite
