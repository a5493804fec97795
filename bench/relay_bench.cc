// The helper of bench/relay-bench.sh, with five modes:
//
//   relay_bench raw NATS_URL SUBJECT COUNT PAYLOAD_BYTES MAX_PENDING
//       The reference: a bare nats.c asynchronous JetStream publisher sending COUNT messages
//       with a Nats-Msg-Id each, at most MAX_PENDING unacknowledged, waiting for every PubAck.
//       Prints "raw <events/s>" and "cpu_us <its own CPU time, user + system>".
//   relay_bench stream NATS_URL NAME SUBJECTS
//       Creates file-backed stream NAME over SUBJECTS with a 2-minute duplicate window.
//   relay_bench drain NATS_URL STREAM COUNT TIMEOUT_S
//       Waits until STREAM holds COUNT messages; prints "drain <events/s>" measured from the
//       first message stored to the last.
//   relay_bench bare DB_CONNINFO NATS_URL COUNT BATCH MAX_PENDING [VARIANT]
//       The ceiling: the least work any relay must do per event, for COUNT outbox rows. Reads
//       a batch of pending rows (one indexed statement, no lock), publishes each as the raw
//       publisher does with its event id as Nats-Msg-Id, and marks the previous batch published
//       with its PubAcks' stream sequences (one UPDATE by primary key) while this one's acks
//       arrive. No functions, no locks, no attempt records, no ordering keys, one relay only:
//       it reads past the rows in flight by id, which a real relay must not (ids are not
//       committed in order), and it takes the PubAcks to arrive in publish order (true for one
//       stream on one connection) instead of matching each to its row. Prints "bare
//       <events/s>", "marked <rows>" and "cpu_us <its own CPU time>". VARIANT (default plain)
//       adds back, one batch at a time: "locked", a transaction per batch that locks its rows
//       (FOR UPDATE SKIP LOCKED) and marks them before COMMIT; "functions", the same through
//       idem.outbox_lock and idem.outbox_settle. Neither records attempts or overlaps batches.
//       "queue" is plain with the pending rows' ids read from a narrow table,
//       idem.outbox_queue (id, day), that the caller fills: the read takes a batch of ids from
//       it, then their rows by primary key, and the mark deletes the batch's ids from it in the
//       same statement as the UPDATE (on an outbox without indexes whose predicates name state,
//       that UPDATE can be HOT). It reads the first row's day partition only: rows enqueued
//       across a UTC midnight would be skipped, so the bench's drain would time out.
//   relay_bench latency DB_CONNINFO NATS_URL SUBJECT RATE SECONDS
//       Enqueues RATE events/s for SECONDS (one transaction each, idem.outbox_enqueue), and a
//       subscriber on SUBJECT notes when each arrives; prints p50/p99/max of commit-to-consume.
#include <libpq-fe.h>
#include <nats/nats.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int64_t SelfCpuMicros() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1'000'000LL + u.ru_utime.tv_usec +
         u.ru_stime.tv_usec;
}

std::atomic<int64_t> acked{0};
std::atomic<int64_t> failed{0};

void OnAck(jsCtx*, natsMsg* msg, jsPubAck* ack, jsPubAckErr*, void*) {
  (ack != nullptr ? acked : failed).fetch_add(1);
  natsMsg_Destroy(msg);
}

int Raw(const char* url, const std::string& subject, int64_t count, int payload_bytes,
        int max_pending) {
  natsConnection* nc = nullptr;
  if (natsConnection_ConnectTo(&nc, url) != NATS_OK) return std::fprintf(stderr, "connect failed\n"), 1;
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.PublishAsync.AckHandler = &OnAck;
  jo.PublishAsync.MaxPending = max_pending;
  jsCtx* js = nullptr;
  natsConnection_JetStream(&js, nc, &jo);
  const std::string payload(payload_bytes, 'p');
  jsPubOptions po;
  jsPubOptions_Init(&po);
  const auto start = Clock::now();
  for (int64_t i = 0; i < count; ++i) {
    const std::string id = "raw-" + std::to_string(i);
    natsMsg* msg = nullptr;
    natsMsg_Create(&msg, subject.c_str(), nullptr, payload.data(), payload_bytes);
    po.MsgId = id.c_str();
    while (js_PublishMsgAsync(js, &msg, &po) == NATS_TIMEOUT) {
    }
    natsMsg_Destroy(msg);
  }
  jsPubOptions done;
  jsPubOptions_Init(&done);
  done.MaxWait = 60000;
  js_PublishAsyncComplete(js, &done);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("raw %.0f acked=%lld failed=%lld\n", count / seconds, static_cast<long long>(acked.load()),
              static_cast<long long>(failed.load()));
  std::printf("cpu_us %lld\n", static_cast<long long>(SelfCpuMicros()));
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return 0;
}

int CreateStream(const char* url, const char* name, const char* subjects) {
  natsConnection* nc = nullptr;
  if (natsConnection_ConnectTo(&nc, url) != NATS_OK) return std::fprintf(stderr, "connect failed\n"), 1;
  jsCtx* js = nullptr;
  natsConnection_JetStream(&js, nc, nullptr);
  const char* subject_list[] = {subjects};
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  config.Name = name;
  config.Subjects = subject_list;
  config.SubjectsLen = 1;
  config.Storage = js_FileStorage;
  config.Duplicates = 120LL * 1'000'000'000LL;
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = js_AddStream(&info, js, &config, nullptr, &code);
  if (info != nullptr) jsStreamInfo_Destroy(info);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  if (s != NATS_OK) return std::fprintf(stderr, "stream %s: %s (%d)\n", name, natsStatus_GetText(s), code), 1;
  return 0;
}

uint64_t StreamMessages(jsCtx* js, const char* stream) {
  jsStreamInfo* si = nullptr;
  if (js_GetStreamInfo(&si, js, stream, nullptr, nullptr) != NATS_OK) return 0;
  const uint64_t n = si->State.Msgs;
  jsStreamInfo_Destroy(si);
  return n;
}

int Drain(const char* url, const char* stream, uint64_t count, int timeout_s) {
  natsConnection* nc = nullptr;
  if (natsConnection_ConnectTo(&nc, url) != NATS_OK) return std::fprintf(stderr, "connect failed\n"), 1;
  jsCtx* js = nullptr;
  natsConnection_JetStream(&js, nc, nullptr);
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  Clock::time_point first{};
  uint64_t first_count = 0;
  for (;;) {
    const uint64_t n = StreamMessages(js, stream);
    const auto now = Clock::now();
    if (n > 0 && first == Clock::time_point{}) {
      first = now;
      first_count = n;
    }
    if (n >= count) {
      const double seconds = std::chrono::duration<double>(now - first).count();
      std::printf("drain %.0f\n", (n - first_count) / std::max(seconds, 1e-3));
      break;
    }
    if (now > deadline) return std::fprintf(stderr, "drain: %llu of %llu\n",
                                            static_cast<unsigned long long>(n),
                                            static_cast<unsigned long long>(count)), 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // few polls: they cost the server CPU
  }
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return 0;
}

// The stream sequences of the bare relay's PubAcks, in arrival order.
struct BareAcks {
  std::vector<uint64_t> seqs;
  std::atomic<int64_t> arrived{0};
  std::atomic<int64_t> failed{0};
};

void OnBareAck(jsCtx*, natsMsg* msg, jsPubAck* ack, jsPubAckErr*, void* closure) {
  auto* acks = static_cast<BareAcks*>(closure);
  const int64_t i = acks->arrived.load(std::memory_order_relaxed);
  if (ack != nullptr && i < static_cast<int64_t>(acks->seqs.size())) acks->seqs[i] = ack->Sequence;
  if (ack == nullptr) acks->failed.fetch_add(1);
  acks->arrived.store(i + 1, std::memory_order_release);  // one nats.c thread calls this
  natsMsg_Destroy(msg);
}

// Integers in PostgreSQL's binary format: big-endian, `bytes` wide.
int64_t BigEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return bytes == 4 ? static_cast<int32_t>(v) : static_cast<int64_t>(v);
}

struct BareBatch {
  std::vector<int64_t> ids;
  int32_t day = 0;
  int64_t first_ack = 0;  // index of its first PubAck in BareAcks::seqs
};

template <typename T>
std::string ArrayText(const std::vector<T>& values, size_t from, size_t n) {
  std::string out = "{";
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ',';
    out += std::to_string(values[from + i]);
  }
  return out + "}";
}

// What the bare relay does beyond reading, publishing and marking (relay_bench bare's VARIANT).
enum class BareVariant {
  kPlain,      // no lock; the previous batch is marked while this one's PubAcks arrive
  kLocked,     // FOR UPDATE SKIP LOCKED in a transaction per batch, held until its mark
  kFunctions,  // as kLocked, through idem.outbox_lock and idem.outbox_settle
  kQueue,      // as kPlain, the pending ids in idem.outbox_queue, deleted by the mark
};

// Marks `batch` published. Returns the rows marked, or -1 on an error.
int64_t MarkBare(PGconn* pg, BareVariant variant, const BareBatch& batch, const BareAcks& acks) {
  const std::string ids = ArrayText(batch.ids, 0, batch.ids.size());
  const std::string seqs = ArrayText(acks.seqs, batch.first_ack, batch.ids.size());
  const std::string day = std::to_string(batch.day);
  PGresult* r = nullptr;
  if (variant == BareVariant::kFunctions) {
    std::string days = "{", dups = "{";
    for (size_t i = 0; i < batch.ids.size(); ++i) {
      days += (i > 0 ? "," : "") + day;
      dups += i > 0 ? ",f" : "f";
    }
    days += "}";
    dups += "}";
    const char* values[] = {ids.c_str(), days.c_str(), seqs.c_str(), dups.c_str()};
    r = PQexecPrepared(pg, "mark", 4, values, nullptr, nullptr, 0);
  } else {
    const char* values[] = {ids.c_str(), seqs.c_str(), day.c_str()};
    r = PQexecPrepared(pg, "mark", 3, values, nullptr, nullptr, 0);
  }
  const bool functions = variant == BareVariant::kFunctions;
  const bool ok = PQresultStatus(r) == (functions ? PGRES_TUPLES_OK : PGRES_COMMAND_OK);
  if (!ok) std::fprintf(stderr, "bare: mark: %s", PQresultErrorMessage(r));
  const int64_t rows =
      !ok ? -1 : std::atoll(functions ? PQgetvalue(r, 0, 0) : PQcmdTuples(r));
  PQclear(r);
  return rows;
}

bool ExecBare(PGconn* pg, const char* sql) {
  PGresult* r = PQexec(pg, sql);
  const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  if (!ok) std::fprintf(stderr, "bare: %s: %s", sql, PQresultErrorMessage(r));
  PQclear(r);
  return ok;
}

int Bare(const char* conninfo, const char* url, int64_t count, int batch_size, int max_pending,
         BareVariant variant) {
  PGconn* pg = PQconnectdb(conninfo);
  if (PQstatus(pg) != CONNECTION_OK) return std::fprintf(stderr, "%s", PQerrorMessage(pg)), 1;
  auto prepare = [&](const char* name, const char* sql) {
    PGresult* r = PQprepare(pg, name, sql, 0, nullptr);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok) std::fprintf(stderr, "bare: prepare %s: %s", name, PQresultErrorMessage(r));
    PQclear(r);
    return ok;
  };
  constexpr const char* kRead =
      "SELECT id, day, event_id, subject, payload FROM idem.outbox "
      "WHERE state = 0 AND id > $1::bigint ORDER BY id LIMIT $2::integer";
  constexpr const char* kMark =
      "UPDATE idem.outbox o SET state = 1, published_at = clock_timestamp(), stream_seq = u.seq "
      "FROM unnest($1::bigint[], $2::bigint[]) AS u(id, seq) "
      "WHERE o.id = u.id AND o.day = $3::integer AND o.state = 0";
  bool prepared = false;
  switch (variant) {
    case BareVariant::kPlain:
      prepared = prepare("read", kRead) && prepare("mark", kMark);
      break;
    case BareVariant::kLocked:
      prepared = prepare("read", (std::string(kRead) + " FOR UPDATE SKIP LOCKED").c_str()) &&
                 prepare("mark", kMark);
      break;
    case BareVariant::kQueue:
      prepared =
          prepare("read",
                  // The batch's ids first, then their rows by primary key in the first
                  // batch row's day partition (a join to the outbox was planned as a merge
                  // join walking its primary key from the first row, through every published
                  // one). One day only, as the bench's rows are; a relay would loop over the
                  // batch's days.
                  "WITH q AS MATERIALIZED (SELECT id, day FROM idem.outbox_queue "
                  "WHERE id > $1::bigint ORDER BY id LIMIT $2::integer) "
                  "SELECT o.id, o.day, o.event_id, o.subject, o.payload FROM idem.outbox o "
                  "WHERE o.day = (SELECT q.day FROM q LIMIT 1) "
                  "AND o.id = ANY (ARRAY(SELECT q.id FROM q)) ORDER BY o.id") &&
          prepare("mark", (std::string("WITH done AS (DELETE FROM idem.outbox_queue q "
                                       "WHERE q.id = ANY($1::bigint[])) ") + kMark).c_str());
      break;
    case BareVariant::kFunctions:
      prepared = prepare("read", "SELECT id, day, event_id, subject, payload "
                                 "FROM idem.outbox_lock($2::integer, $1::bigint)") &&
                 prepare("mark", "SELECT idem.outbox_settle('', $1::bigint[], $2::integer[], "
                                 "$3::bigint[], $4::boolean[], '{}', '{}', NULL)");
      break;
  }
  if (!prepared) return 1;
  const bool per_batch_transaction = variant == BareVariant::kLocked || variant == BareVariant::kFunctions;
  natsConnection* nc = nullptr;
  if (natsConnection_ConnectTo(&nc, url) != NATS_OK) return std::fprintf(stderr, "connect failed\n"), 1;
  BareAcks acks;
  acks.seqs.resize(count);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.PublishAsync.AckHandler = &OnBareAck;
  jo.PublishAsync.AckHandlerClosure = &acks;
  jo.PublishAsync.MaxPending = max_pending;
  jsCtx* js = nullptr;
  natsConnection_JetStream(&js, nc, &jo);
  jsPubOptions po;
  jsPubOptions_Init(&po);
  auto acked_through = [&](int64_t n) {
    while (acks.arrived.load(std::memory_order_acquire) < n) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));  // not a spin: the cores are shared
    }
  };
  int64_t published = 0, marked = 0, after = 0;
  auto mark = [&](const BareBatch& batch) {
    acked_through(batch.first_ack + static_cast<int64_t>(batch.ids.size()));
    const int64_t n = MarkBare(pg, variant, batch, acks);
    if (n >= 0) marked += n;
    return n >= 0;
  };
  const auto start = Clock::now();
  std::optional<BareBatch> previous;
  const std::string limit = std::to_string(batch_size);
  while (published < count) {
    const std::string from = std::to_string(after);
    const char* values[] = {from.c_str(), limit.c_str()};
    if (per_batch_transaction && !ExecBare(pg, "BEGIN")) return 1;
    PGresult* r = PQexecPrepared(pg, "read", 2, values, nullptr, nullptr, 1);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
      std::fprintf(stderr, "bare: read: %s", PQresultErrorMessage(r));
      PQclear(r);
      return 1;
    }
    const int rows = PQntuples(r);
    if (rows == 0) {
      PQclear(r);
      if (per_batch_transaction && !ExecBare(pg, "COMMIT")) return 1;
      break;
    }
    BareBatch batch;
    batch.first_ack = published;
    batch.ids.reserve(rows);
    batch.day = static_cast<int32_t>(BigEndian(PQgetvalue(r, 0, 1), 4));
    for (int i = 0; i < rows && published < count; ++i, ++published) {
      batch.ids.push_back(BigEndian(PQgetvalue(r, i, 0), 8));
      const std::string event_id(PQgetvalue(r, i, 2), PQgetlength(r, i, 2));
      const std::string subject(PQgetvalue(r, i, 3), PQgetlength(r, i, 3));
      natsMsg* msg = nullptr;
      natsMsg_Create(&msg, subject.c_str(), nullptr, PQgetvalue(r, i, 4), PQgetlength(r, i, 4));
      po.MsgId = event_id.c_str();
      while (js_PublishMsgAsync(js, &msg, &po) == NATS_TIMEOUT) {
      }
      natsMsg_Destroy(msg);
    }
    PQclear(r);
    after = batch.ids.back();
    if (per_batch_transaction) {
      if (!mark(batch) || !ExecBare(pg, "COMMIT")) return 1;
      continue;
    }
    if (previous && !mark(*previous)) return 1;
    previous = std::move(batch);
  }
  if (previous && !mark(*previous)) return 1;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("bare %.0f failed=%lld\n", published / seconds, static_cast<long long>(acks.failed.load()));
  std::printf("marked %lld\n", static_cast<long long>(marked));
  std::printf("cpu_us %lld\n", static_cast<long long>(SelfCpuMicros()));
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  PQfinish(pg);
  return 0;
}

struct Latency {
  std::mutex mu;
  std::unordered_map<std::string, Clock::time_point> committed;
  std::unordered_map<std::string, Clock::time_point> received;
};

void OnMessage(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  auto* lat = static_cast<Latency*>(closure);
  const auto now = Clock::now();
  {
    std::lock_guard lock(lat->mu);
    lat->received.emplace(std::string(natsMsg_GetData(msg), natsMsg_GetDataLength(msg)), now);
  }
  natsMsg_Destroy(msg);
}

int LatencyMode(const char* conninfo, const char* url, const char* subject, int rate, int seconds) {
  PGconn* pg = PQconnectdb(conninfo);
  if (PQstatus(pg) != CONNECTION_OK) return std::fprintf(stderr, "%s", PQerrorMessage(pg)), 1;
  natsConnection* nc = nullptr;
  if (natsConnection_ConnectTo(&nc, url) != NATS_OK) return std::fprintf(stderr, "connect failed\n"), 1;
  Latency lat;
  natsSubscription* sub = nullptr;
  natsConnection_Subscribe(&sub, nc, subject, &OnMessage, &lat);
  natsConnection_Flush(nc);
  const int64_t total = static_cast<int64_t>(rate) * seconds;
  const auto start = Clock::now();
  const auto interval = std::chrono::nanoseconds(1'000'000'000LL / rate);
  for (int64_t i = 0; i < total; ++i) {
    std::this_thread::sleep_until(start + interval * i);
    const std::string id = "lat-" + std::to_string(i);
    const char* values[] = {id.c_str(), subject, id.c_str()};
    PQclear(PQexec(pg, "BEGIN"));
    PGresult* r = PQexecParams(pg, "SELECT idem.outbox_enqueue($1, $2, convert_to($3, 'UTF8'))", 3, nullptr,
                     values, nullptr, nullptr, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) std::fprintf(stderr, "%s", PQresultErrorMessage(r));
    PQclear(r);
    PQclear(PQexec(pg, "COMMIT"));
    const auto now = Clock::now();
    std::lock_guard lock(lat.mu);
    lat.committed.emplace(id, now);
  }
  const auto wait_until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < wait_until) {
    {
      std::lock_guard lock(lat.mu);
      if (static_cast<int64_t>(lat.received.size()) >= total) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<double> ms;
  {
    std::lock_guard lock(lat.mu);
    for (const auto& [id, t] : lat.received) {
      auto c = lat.committed.find(id);
      if (c != lat.committed.end()) ms.push_back(std::chrono::duration<double, std::milli>(t - c->second).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  const double achieved = total / std::chrono::duration<double>(Clock::now() - start).count();
  if (ms.empty()) return std::fprintf(stderr, "latency: nothing received\n"), 1;
  std::printf("latency received=%zu of %lld p50=%.2f p99=%.2f max=%.2f (enqueue rate %d/s)\n", ms.size(),
              static_cast<long long>(total), ms[ms.size() / 2], ms[ms.size() * 99 / 100], ms.back(),
              rate);
  (void)achieved;
  natsSubscription_Destroy(sub);
  natsConnection_Destroy(nc);
  PQfinish(pg);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "raw" && argc == 7) {
    return Raw(argv[2], argv[3], std::atoll(argv[4]), std::atoi(argv[5]), std::atoi(argv[6]));
  }
  if (mode == "stream" && argc == 5) return CreateStream(argv[2], argv[3], argv[4]);
  if (mode == "drain" && argc == 6) return Drain(argv[2], argv[3], std::strtoull(argv[4], nullptr, 10), std::atoi(argv[5]));
  if (mode == "bare" && (argc == 7 || argc == 8)) {
    const std::string v = argc == 8 ? argv[7] : "plain";
    const BareVariant variant = v == "locked"      ? BareVariant::kLocked
                                : v == "functions" ? BareVariant::kFunctions
                                : v == "queue"     ? BareVariant::kQueue
                                                   : BareVariant::kPlain;
    if (v != "plain" && v != "locked" && v != "functions" && v != "queue") {
      return std::fprintf(stderr, "bare: VARIANT is plain, locked, functions or queue\n"), 2;
    }
    return Bare(argv[2], argv[3], std::atoll(argv[4]), std::atoi(argv[5]), std::atoi(argv[6]), variant);
  }
  if (mode == "latency" && argc == 7) {
    return LatencyMode(argv[2], argv[3], argv[4], std::atoi(argv[5]), std::atoi(argv[6]));
  }
  std::fprintf(stderr,
               "usage: relay_bench raw NATS_URL SUBJECT COUNT PAYLOAD_BYTES MAX_PENDING\n"
               "       relay_bench stream NATS_URL NAME SUBJECTS\n"
               "       relay_bench drain NATS_URL STREAM COUNT TIMEOUT_S\n"
               "       relay_bench bare DB_CONNINFO NATS_URL COUNT BATCH MAX_PENDING [plain|locked|functions]\n"
               "       relay_bench latency DB_CONNINFO NATS_URL SUBJECT RATE SECONDS\n");
  return 2;
}
