#include "util/duplicate_race.h"

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

namespace idem::testing {

DuplicateTally RaceDuplicates(int clients, const std::function<HttpResponse(int)>& send) {
  std::latch start(clients);
  std::atomic<int> created{0}, conflicts{0}, other{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      const HttpResponse r = send(i);
      if (r.status == 201) {
        ++created;
      } else if (r.status == 409 && !r.Header("Retry-After").empty()) {
        ++conflicts;
      } else {
        ++other;
      }
    });
  }
  for (auto& t : threads) t.join();
  return {created.load(), conflicts.load(), other.load()};
}

}  // namespace idem::testing
