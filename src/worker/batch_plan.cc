#include "worker/batch_plan.h"

#include <algorithm>
#include <numeric>
#include <unordered_set>

namespace idem::worker {

std::vector<std::vector<size_t>> PlanBatches(const std::vector<BatchCandidate>& ready,
                                             size_t max_batch) {
  std::vector<std::vector<size_t>> batches;
  if (ready.empty()) return batches;
  max_batch = std::max<size_t>(max_batch, 1);
  const size_t count = (ready.size() + max_batch - 1) / max_batch;
  const size_t target = (ready.size() + count - 1) / count;

  std::vector<size_t> order(ready.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return ready[a].stream_sequence < ready[b].stream_sequence;
  });
  struct Open {
    std::unordered_set<std::string_view> keys;
    std::unordered_set<std::string_view> ordering_keys;
  };
  std::vector<Open> open;
  for (size_t i : order) {
    const BatchCandidate& c = ready[i];
    size_t b = 0;
    for (; b < batches.size(); ++b) {
      if (batches[b].size() >= target) continue;
      if (open[b].keys.contains(c.idempotency_key)) continue;
      if (c.ordering_key && open[b].ordering_keys.contains(*c.ordering_key)) continue;
      break;
    }
    if (b == batches.size()) {
      batches.emplace_back();
      open.emplace_back();
    }
    batches[b].push_back(i);
    open[b].keys.insert(c.idempotency_key);
    if (c.ordering_key) open[b].ordering_keys.insert(*c.ordering_key);
  }
  return batches;
}

}  // namespace idem::worker
