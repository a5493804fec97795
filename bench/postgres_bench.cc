// Begin+complete pairs per second on the PostgreSQL store, for bench/postgres-bench.sh, which
// runs pgbench with the same two SQL calls at the same concurrency for comparison.
//
//   idem_postgres_bench URL THREADS SECONDS
//
// Each thread drives fresh keys (every pair acquires), through the store's public interface
// with the system clock, as a gateway would. Prints "pairs_per_s N errors E".
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "idem/fingerprint.h"
#include "idem/store.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s URL THREADS SECONDS\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[2]);
  const auto duration = std::chrono::seconds(std::atoi(argv[3]));
  auto store = idem::OpenStore(argv[1]);
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", store.status().ToString().c_str());
    return 1;
  }
  const auto fp = *idem::ComputeFingerprint({}, {"POST", "/bench", "", "body", {}});
  const idem::StoredResponse response{201, {{"Content-Type", "application/json"}},
                                      R"({"id":"pay_1","amount":1000})"};
  std::atomic<long> pairs{0}, errors{0};
  std::atomic<bool> stop{false};
  const long run = std::chrono::steady_clock::now().time_since_epoch().count();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (long i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const idem::Scope scope{"bench", "", std::to_string(run) + "-" + std::to_string(t) +
                                                 "-" + std::to_string(i)};
        auto begun = (*store)->Begin(scope, fp, std::chrono::seconds(30));
        auto token = begun.ok() ? idem::OwnedToken(*begun) : std::nullopt;
        if (!token) {
          errors.fetch_add(1);
          continue;
        }
        auto done = (*store)->Complete(scope, *token, response, std::chrono::hours(24));
        if (!done.ok() || *done != idem::CompleteOutcome::kOk) {
          errors.fetch_add(1);
          continue;
        }
        pairs.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  const auto started = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(duration);
  stop = true;
  for (auto& w : workers) w.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("pairs_per_s %.0f errors %ld\n", pairs.load() / seconds, errors.load());
  return 0;
}
