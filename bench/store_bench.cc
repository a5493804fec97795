// Store micro-benchmarks (Google Benchmark): begin+complete pairs per second on fresh keys and
// replay lookups per second, for each store, at 1 and 2 threads.
//
//   build/release/bench/idem_store_bench                       # everything
//   build/release/bench/idem_store_bench --benchmark_filter=Memory
//
// bench/run-store-bench.sh runs it and prints each store's figures as a ratio to the memory
// store measured in the same run.
#include <benchmark/benchmark.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

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
  std::string path;
  std::atomic<uint64_t> next_key{0};
};
Shared* g_shared = nullptr;

std::string SqlitePath() {
  return (std::filesystem::temp_directory_path() / "idem-bench.db").string();
}

void RemoveDb(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
}

void Setup(const std::string& url, const std::string& path) {
  g_shared = new Shared;
  g_shared->path = path;
  if (!path.empty()) RemoveDb(path);
  auto store = OpenStore(url);
  if (!store.ok()) {
    std::fprintf(stderr, "cannot open %s: %s\n", url.c_str(), store.status().ToString().c_str());
    std::abort();
  }
  g_shared->store = std::move(*store);
}

void Teardown() {
  if (!g_shared->path.empty()) RemoveDb(g_shared->path);
  delete g_shared;
  g_shared = nullptr;
}

void BeginComplete(benchmark::State& state) {
  Store& store = *g_shared->store;
  const std::string prefix = "bench-" + std::to_string(state.thread_index()) + "-";
  for (auto _ : state) {
    const Scope scope{"tenant", "", prefix + std::to_string(g_shared->next_key++)};
    auto begun = store.Begin(scope, BenchFp(), std::chrono::seconds(30));
    const FencingToken token = begun.ok() ? OwnedToken(*begun).value_or(0) : 0;
    if (token == 0) {
      state.SkipWithError("begin did not acquire");
      break;
    }
    auto done = store.Complete(scope, token, BenchResponse(), std::chrono::hours(24));
    if (!done.ok() || *done != CompleteOutcome::kOk) {
      state.SkipWithError("complete failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["pairs_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void ReplayLookup(benchmark::State& state) {
  Store& store = *g_shared->store;
  constexpr int kKeys = 1024;
  static std::once_flag filled;
  static Store* filled_for = nullptr;
  // Each benchmark instance fills its store once (thread 0 may not be first to arrive).
  static std::mutex fill_mu;
  {
    std::lock_guard lock(fill_mu);
    if (filled_for != &store) {
      for (int i = 0; i < kKeys; ++i) {
        const Scope scope{"tenant", "", "replay-" + std::to_string(i)};
        auto begun = store.Begin(scope, BenchFp(), std::chrono::seconds(30));
        if (auto token = begun.ok() ? OwnedToken(*begun) : std::nullopt) {
          (void)store.Complete(scope, *token, BenchResponse(), std::chrono::hours(24));
        }
      }
      filled_for = &store;
    }
  }
  (void)filled;
  uint64_t i = static_cast<uint64_t>(state.thread_index()) * 7919;
  for (auto _ : state) {
    const Scope scope{"tenant", "", "replay-" + std::to_string(i++ % kKeys)};
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
void TeardownAny(const benchmark::State&) { Teardown(); }

#define IDEM_STORE_BENCH(fn, name, setup)                                            \
  BENCHMARK(fn)->Name(name)->Setup(setup)->Teardown(TeardownAny)->Threads(1)->Threads(2) \
      ->UseRealTime()->MinTime(1.0)

IDEM_STORE_BENCH(BeginComplete, "Memory/BeginComplete", SetupMemory);
IDEM_STORE_BENCH(ReplayLookup, "Memory/ReplayLookup", SetupMemory);
IDEM_STORE_BENCH(BeginComplete, "Sqlite/BeginComplete", SetupSqlite);
IDEM_STORE_BENCH(ReplayLookup, "Sqlite/ReplayLookup", SetupSqlite);

}  // namespace

BENCHMARK_MAIN();
