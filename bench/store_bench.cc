// Store micro-benchmarks (Google Benchmark): begin+complete pairs per second on fresh keys and
// replay lookups per second, for each store, at 1 and 2 threads.
//
//   build/release/bench/idem_store_bench                       # everything
//   build/release/bench/idem_store_bench --benchmark_filter=Memory
//
// bench/run-store-bench.sh runs it and prints each store's figures as a ratio to the memory
// store measured in the same run.
#include <benchmark/benchmark.h>
#include <sqlite3.h>

#include <atomic>
#include <charconv>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unistd.h>
#include <cstdlib>

#include "idem/fingerprint.h"
#include "idem/store.h"

namespace {

using namespace idem;

const Fingerprint& BenchFp() {
  static const Fingerprint fp = *ComputeFingerprint({}, {"POST", "/v1/payments", "", "{}", {}});
  return fp;
}

const StoredResponse& BenchResponse() {
  static const StoredResponse r{201,
                                {{"Content-Type", "application/json"},
                                 {"Location", "/v1/payments/pay_123"}},
                                std::string(256, 'x')};
  return r;
}

// One store per benchmark (shared by its threads), created by thread 0 in setup.
struct Shared {
  std::unique_ptr<Store> store;
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  std::string path;
  std::atomic<uint64_t> next_key{0};
};
Shared* g_shared = nullptr;
// Where the next benchmark's fresh keys start: never reused within a process, since a store
// with a durable tier (the tiered store) keeps an earlier benchmark's records.
uint64_t g_next_key_base = 0;

std::string SqlitePath() {
  return (std::filesystem::temp_directory_path() / "idem-bench.db").string();
}

void RemoveDb(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
}

void Setup(const std::string& url, const std::string& path, bool system_clock = false,
           const std::string& durable_store = "") {
  g_shared = new Shared;
  g_shared->path = path;
  if (!path.empty()) RemoveDb(path);
  StoreOptions options;
  options.clock = system_clock ? SystemClock() : g_shared->clock;
  options.durable_store = durable_store;
  g_shared->next_key = g_next_key_base;
  auto store = OpenStore(url, options);
  if (!store.ok()) {
    std::fprintf(stderr, "cannot open %s: %s\n", url.c_str(), store.status().ToString().c_str());
    std::abort();
  }
  g_shared->store = std::move(*store);
}

void Teardown() {
  g_next_key_base = g_shared->next_key.load() + 1;
  if (!g_shared->path.empty()) RemoveDb(g_shared->path);
  delete g_shared;
  g_shared = nullptr;
}

// Writes "prefix<n>" into `key` without allocating once its capacity suffices.
void SetKey(std::string& key, size_t prefix_len, uint64_t n) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
  key.resize(prefix_len);
  key.append(digits, end);
}

void BeginComplete(benchmark::State& state) {
  Store& store = *g_shared->store;
  Scope scope{"tenant-3f9a0c12d4e5b6a7", "", "bench-" + std::to_string(state.thread_index()) + "-"};
  const size_t prefix_len = scope.key.size();
  for (auto _ : state) {
    SetKey(scope.key, prefix_len, g_shared->next_key.fetch_add(1, std::memory_order_relaxed));
    auto begun = store.Begin(scope, BenchFp(), std::chrono::seconds(30));
    const FencingToken token = begun.ok() ? OwnedToken(*begun).value_or(0) : 0;
    if (token == 0) {
      const std::string why = "begin did not acquire: " +
                              (begun.ok() ? std::string(OutcomeName(*begun))
                                          : begun.status().ToString());
      state.SkipWithError(why.c_str());
      break;
    }
    auto done = store.Complete(scope, token, BenchResponse(), std::chrono::hours(24));
    if (!done.ok() || *done != CompleteOutcome::kOk) {
      const std::string why = "complete failed: " + (done.ok() ? std::string(CompleteOutcomeName(*done))
                                                               : done.status().ToString());
      state.SkipWithError(why.c_str());
      break;
    }
  }
  state.counters["pairs_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// The production shape: records expire after their retention and a sweep removes them, so the
// store holds a bounded number of live records (here 100,000) instead of growing forever. Each
// pair advances the store's clock by 1 ms with a 100 s retention; every 1,024 pairs one thread
// sweeps, and the sweep's cost is counted in the figure.
void BeginCompleteSteady(benchmark::State& state) {
  Store& store = *g_shared->store;
  ManualClock& clock = *g_shared->clock;
  Scope scope{"tenant-3f9a0c12d4e5b6a7", "", "steady-" + std::to_string(state.thread_index()) + "-"};
  const size_t prefix_len = scope.key.size();
  uint64_t n = 0;
  for (auto _ : state) {
    SetKey(scope.key, prefix_len, g_shared->next_key.fetch_add(1, std::memory_order_relaxed));
    auto begun = store.Begin(scope, BenchFp(), std::chrono::seconds(30));
    const FencingToken token = begun.ok() ? OwnedToken(*begun).value_or(0) : 0;
    if (token == 0) {
      state.SkipWithError("begin did not acquire");
      break;
    }
    auto done = store.Complete(scope, token, BenchResponse(), std::chrono::seconds(100));
    if (!done.ok() || *done != CompleteOutcome::kOk) {
      state.SkipWithError("complete failed");
      break;
    }
    clock.Advance(Duration(1));
    if (++n % 1024 == 0 && state.thread_index() == 0) (void)store.Sweep(clock.Now());
  }
  state.counters["pairs_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

constexpr int kReplayKeys = 1024;

// Completes kReplayKeys records for ReplayLookup to find.
void FillForReplay() {
  Store& store = *g_shared->store;
  for (int i = 0; i < kReplayKeys; ++i) {
    const Scope scope{"tenant-3f9a0c12d4e5b6a7", "", "replay-" + std::to_string(i)};
    auto begun = store.Begin(scope, BenchFp(), std::chrono::seconds(30));
    if (begun.ok() && std::holds_alternative<Replay>(*begun)) continue;  // a durable tier's
    auto token = begun.ok() ? OwnedToken(*begun) : std::nullopt;
    if (!token) std::abort();
    (void)store.Complete(scope, *token, BenchResponse(), std::chrono::hours(24));
  }
}

void ReplayLookup(benchmark::State& state) {
  Store& store = *g_shared->store;
  Scope scope{"tenant-3f9a0c12d4e5b6a7", "", "replay-"};
  uint64_t i = static_cast<uint64_t>(state.thread_index()) * 7919;
  for (auto _ : state) {
    SetKey(scope.key, 7, i++ % kReplayKeys);
    auto begun = store.Begin(scope, BenchFp(), std::chrono::seconds(30));
    if (!begun.ok() || !std::holds_alternative<Replay>(*begun)) {
      state.SkipWithError("expected a replay");
      break;
    }
    benchmark::DoNotOptimize(std::get<Replay>(*begun).response.body.data());
  }
  state.counters["lookups_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void SetupMemory(const benchmark::State&) { Setup("memory", ""); }
void SetupSqlite(const benchmark::State&) {
  Setup("sqlite:" + SqlitePath() + "?durability=normal", SqlitePath());
}
void SetupMemoryReplay(const benchmark::State& s) {
  SetupMemory(s);
  FillForReplay();
}
void SetupSqliteReplay(const benchmark::State& s) {
  SetupSqlite(s);
  FillForReplay();
}
void TeardownAny(const benchmark::State&) { Teardown(); }

// Networked stores run in production mode (the server's clock), each benchmark under a key
// prefix of its own so that its fresh keys never meet an earlier run's records.
std::string NetworkUrl(const char* env) {
  static int run = 0;
  const std::string base = std::getenv(env);
  return base + (base.find('?') == std::string::npos ? "?" : "&") + "prefix=bench" +
         std::to_string(getpid()) + "-" + std::to_string(++run);
}
void SetupRedis(const benchmark::State&) { Setup(NetworkUrl("IDEM_BENCH_REDIS_URL"), "", true); }
void SetupRedisReplay(const benchmark::State& s) {
  SetupRedis(s);
  FillForReplay();
}

// PostgreSQL (IDEM_BENCH_POSTGRES_URL, a database of its own: records stay between runs, and
// fresh keys never repeat within a process).
void SetupPostgres(const benchmark::State&) {
  Setup(std::getenv("IDEM_BENCH_POSTGRES_URL"), "", true);
}
void SetupPostgresReplay(const benchmark::State& s) {
  SetupPostgres(s);
  FillForReplay();
}

// The tiered store: Redis (IDEM_BENCH_REDIS_URL) in front of PostgreSQL
// (IDEM_BENCH_DURABLE_URL).
void SetupTiered(const benchmark::State&) {
  Setup(NetworkUrl("IDEM_BENCH_REDIS_URL"), "", true, std::getenv("IDEM_BENCH_DURABLE_URL"));
}
void SetupTieredReplay(const benchmark::State& s) {
  SetupTiered(s);
  FillForReplay();
}

// A replay whose record Redis no longer has (it lost its data) and PostgreSQL does: the Begin
// misses in Redis, reads PostgreSQL, copies the record back into Redis and replays. The records
// are completed through a tiered store on another Redis key prefix, so the measured store's
// Redis has none of them; each key misses once, so the run is kMissKeys iterations.
constexpr int kMissKeys = 4000;
std::string g_miss_tenant;
void SetupTieredMiss(const benchmark::State& s) {
  const char* durable = std::getenv("IDEM_BENCH_DURABLE_URL");
  g_miss_tenant = "miss-" + std::to_string(getpid()) + "-" + std::to_string(rand());
  {
    StoreOptions options;
    options.durable_store = durable;
    auto filler = OpenStore(NetworkUrl("IDEM_BENCH_REDIS_URL"), options);
    if (!filler.ok()) std::abort();
    for (int i = 0; i < kMissKeys; ++i) {
      const Scope scope{g_miss_tenant, "", "k" + std::to_string(i)};
      auto begun = (*filler)->Begin(scope, BenchFp(), std::chrono::seconds(30));
      auto token = begun.ok() ? OwnedToken(*begun) : std::nullopt;
      if (!token) std::abort();
      (void)(*filler)->Complete(scope, *token, BenchResponse(), std::chrono::hours(24));
    }
  }
  SetupTiered(s);
}

void MissFoundInDurable(benchmark::State& state) {
  Store& store = *g_shared->store;
  Scope scope{g_miss_tenant, "", "k"};
  uint64_t i = 0;
  for (auto _ : state) {
    SetKey(scope.key, 1, i++);
    auto begun = store.Begin(scope, BenchFp(), std::chrono::seconds(30));
    if (!begun.ok() || !std::holds_alternative<Replay>(*begun)) {
      state.SkipWithError("expected a replay from PostgreSQL");
      break;
    }
  }
  state.counters["lookups_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// ---- References, measured in the same run so the script can print ratios --------------------

// What a begin+complete pair costs at the least in process memory: insert a small value under a
// fresh key, then overwrite it with the response, in one mutex-guarded std::unordered_map.
void ReferenceMapInsertUpdate(benchmark::State& state) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::string> map;
  if (state.thread_index() == 0) {
    std::lock_guard lock(mu);
    map.clear();
  }
  std::string key = "tenant-3f9a0c12d4e5b6a7\0\0ref-" + std::to_string(state.thread_index()) + "-";
  const size_t prefix_len = key.size();
  const std::string small(48, 'i');
  for (auto _ : state) {
    SetKey(key, prefix_len, g_shared->next_key.fetch_add(1, std::memory_order_relaxed));
    {
      std::lock_guard lock(mu);
      map.emplace(key, small);
    }
    std::string value = BenchResponse().body + "headers-and-status-of-about-sixty-bytes";
    {
      std::lock_guard lock(mu);
      map.find(key)->second = std::move(value);
    }
  }
  state.counters["pairs_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// What a begin+complete pair costs at the least in SQLite with the same settings (WAL,
// synchronous=NORMAL): one autocommit INSERT and one autocommit UPDATE of a row shaped like
// idem's, with the same two indexes. Each is a durable commit, as begin and complete must be.
void ReferenceSqliteInsertUpdate(benchmark::State& state) {
  static std::mutex mu;
  static sqlite3* db = nullptr;
  static sqlite3_stmt* insert = nullptr;
  static sqlite3_stmt* update = nullptr;
  {
    std::lock_guard lock(mu);
    if (db == nullptr) {
      const std::string path = SqlitePath() + "-ref";
      RemoveDb(path);
      sqlite3_open(path.c_str(), &db);
      sqlite3_exec(db,
                   "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                   "CREATE TABLE r (k TEXT PRIMARY KEY, fp BLOB, e INTEGER, body BLOB);"
                   "CREATE INDEX r_e ON r (e);",
                   nullptr, nullptr, nullptr);
      sqlite3_prepare_v2(db, "INSERT INTO r VALUES (?1, zeroblob(32), ?2, NULL)", -1, &insert,
                         nullptr);
      sqlite3_prepare_v2(db, "UPDATE r SET body = ?2, e = ?3 WHERE k = ?1", -1, &update, nullptr);
    }
  }
  static std::atomic<uint64_t> next_key{0};  // never reset: the table lives across runs
  std::string key = "ref-";
  const size_t prefix_len = key.size();
  const std::string& body = BenchResponse().body;
  int64_t n = 0;
  for (auto _ : state) {
    SetKey(key, prefix_len, next_key.fetch_add(1, std::memory_order_relaxed));
    std::lock_guard lock(mu);
    sqlite3_bind_text(insert, 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
    sqlite3_bind_int64(insert, 2, ++n);
    if (sqlite3_step(insert) != SQLITE_DONE) state.SkipWithError(sqlite3_errmsg(db));
    sqlite3_reset(insert);
    sqlite3_bind_text(update, 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
    sqlite3_bind_blob(update, 2, body.data(), static_cast<int>(body.size()), SQLITE_STATIC);
    sqlite3_bind_int64(update, 3, n + 1000);
    if (sqlite3_step(update) != SQLITE_DONE) state.SkipWithError(sqlite3_errmsg(db));
    sqlite3_reset(update);
  }
  state.counters["pairs_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

#define IDEM_STORE_BENCH(fn, name, setup)                                            \
  BENCHMARK(fn)->Name(name)->Setup(setup)->Teardown(TeardownAny)->Threads(1)->Threads(2) \
      ->UseRealTime()->MinTime(1.0)

IDEM_STORE_BENCH(ReferenceMapInsertUpdate, "Reference/MapInsertUpdate", SetupMemory);
IDEM_STORE_BENCH(ReferenceSqliteInsertUpdate, "Reference/SqliteInsertUpdate", SetupMemory);
IDEM_STORE_BENCH(BeginComplete, "Memory/BeginComplete", SetupMemory);
IDEM_STORE_BENCH(BeginCompleteSteady, "Memory/BeginCompleteSteady", SetupMemory);
IDEM_STORE_BENCH(ReplayLookup, "Memory/ReplayLookup", SetupMemoryReplay);
IDEM_STORE_BENCH(BeginComplete, "Sqlite/BeginComplete", SetupSqlite);
IDEM_STORE_BENCH(BeginCompleteSteady, "Sqlite/BeginCompleteSteady", SetupSqlite);
IDEM_STORE_BENCH(ReplayLookup, "Sqlite/ReplayLookup", SetupSqliteReplay);

// Networked stores: registered only when their server is given, at the concurrencies the
// comparison with redis-benchmark / pgbench uses (bench/redis-bench.sh).
void RegisterNetworkBenchmarks() {
  // Pairs and replays of one networked store, at the concurrencies the comparisons use.
  auto register_store = [](const std::string& store, void (*setup)(const benchmark::State&),
                           void (*setup_replay)(const benchmark::State&)) {
    for (auto [fn, what, set_up] : {std::tuple{&BeginComplete, "/BeginComplete", setup},
                                    std::tuple{&ReplayLookup, "/ReplayLookup", setup_replay}}) {
      benchmark::RegisterBenchmark((store + what).c_str(), fn)
          ->Setup(set_up)
          ->Teardown(TeardownAny)
          ->Threads(1)->Threads(2)->Threads(8)->Threads(16)
          ->UseRealTime()
          ->MinTime(2.0);
    }
  };
  if (std::getenv("IDEM_BENCH_POSTGRES_URL") != nullptr) {
    register_store("Postgres", SetupPostgres, SetupPostgresReplay);
  }
  if (std::getenv("IDEM_BENCH_REDIS_URL") == nullptr) return;
  register_store("Redis", SetupRedis, SetupRedisReplay);
  if (std::getenv("IDEM_BENCH_DURABLE_URL") != nullptr) {
    register_store("Tiered", SetupTiered, SetupTieredReplay);
    benchmark::RegisterBenchmark("Tiered/MissFoundInDurable", MissFoundInDurable)
        ->Setup(SetupTieredMiss)
        ->Teardown(TeardownAny)
        ->Threads(1)
        ->Iterations(kMissKeys)
        ->UseRealTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  RegisterNetworkBenchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
