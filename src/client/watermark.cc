#include "idem/watermark.h"

#include <algorithm>
#include <unordered_map>

#include "core/enum_names.h"
#include "core/mutex.h"

namespace idem {

std::string_view SequenceOutcomeName(SequenceOutcome outcome) {
  using enum SequenceOutcome;
  static constexpr internal::EnumName<SequenceOutcome> kNames[] = {
      {kNew, "new"}, {kDuplicate, "duplicate"}, {kTooOld, "too_old"}};
  return internal::NameOf(kNames, outcome, "unknown");
}

void SequenceWindow::AdvanceFloor(uint64_t new_floor) {
  const uint64_t end = std::min(new_floor, floor_ + kWindow);
  for (uint64_t s = floor_ + 1; s <= end; ++s) {
    if (Test(s)) {
      Clear(s);
      if (contiguous_ == s - 1) contiguous_ = s;
    } else {
      ++abandoned_;
    }
  }
  if (new_floor > end) abandoned_ += new_floor - end;
  floor_ = new_floor;
}

SequenceOutcome SequenceWindow::Observe(uint64_t seq) {
  if (seq == 0) return SequenceOutcome::kTooOld;
  if (seq <= contiguous_) return SequenceOutcome::kDuplicate;
  if (seq <= floor_) return SequenceOutcome::kTooOld;
  if (seq > floor_ + kWindow) AdvanceFloor(seq - kWindow);
  if (Test(seq)) return SequenceOutcome::kDuplicate;
  Set(seq);
  // Fold the seen prefix of the window into the floor: at most kWindow steps, O(1) amortised.
  while (Test(floor_ + 1)) AdvanceFloor(floor_ + 1);
  return SequenceOutcome::kNew;
}

struct SequenceDeduplicator::State {
  mutable Mutex mu;
  std::unordered_map<std::string, SequenceWindow> windows IDEM_GUARDED_BY(mu);
};

SequenceDeduplicator::SequenceDeduplicator() : state_(std::make_unique<State>()) {}
SequenceDeduplicator::~SequenceDeduplicator() = default;

SequenceOutcome SequenceDeduplicator::Observe(std::string_view producer, uint64_t seq) {
  State& s = *state_;
  MutexLock lock(s.mu);
  auto it = s.windows.find(std::string(producer));
  if (it == s.windows.end()) {
    it = s.windows.emplace(std::string(producer), SequenceWindow()).first;
  }
  return it->second.Observe(seq);
}

size_t SequenceDeduplicator::producers() const {
  const State& s = *state_;
  MutexLock lock(s.mu);
  return s.windows.size();
}

}  // namespace idem
