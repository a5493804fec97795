// Sequence watermark: deduplication for producers that number their messages 1, 2, 3 ... per
// stream, in O(1) memory per producer instead of one record per message.
//
// Per producer it keeps two numbers and a fixed window of kWindow bits:
//   contiguous  every sequence number <= contiguous was seen (a certain duplicate below it)
//   floor       every sequence number <= floor is decided: seen, or given up on
//   window      one bit per number in floor+1 .. floor+kWindow: seen or not
// A number above the window slides it up, giving up on the unseen numbers it passes over; they
// can no longer be told apart from duplicates and are answered kTooOld.
//
// Limits (docs/client.md): reordering deeper than kWindow turns late first deliveries into
// kTooOld; a producer that restarts its numbering at 1 looks like a stream of duplicates (give
// each producer incarnation its own id); the state lives in memory unless the caller persists
// contiguous, floor and the window with the business write.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>


namespace idem {

enum class SequenceOutcome {
  kNew,        // first time seen: process it
  kDuplicate,  // seen before, for certain: drop it
  // Below the window and above the contiguous watermark: it may be a duplicate or a first
  // delivery that arrived later than the window allows. Treat it as a duplicate (drop it and
  // count it) unless a slower, exact check (a keyed record) can decide. Also the answer for 0.
  kTooOld,
};

std::string_view SequenceOutcomeName(SequenceOutcome outcome);

// One producer's state. Thread safety: not thread-safe; guard it, or use SequenceDeduplicator.
class SequenceWindow {
 public:
  static constexpr uint64_t kWindow = 1024;

  // Records `seq` and says whether it was new. REQUIRES: seq >= 1 (0 is answered kTooOld).
  SequenceOutcome Observe(uint64_t seq);

  uint64_t contiguous() const { return contiguous_; }
  uint64_t floor() const { return floor_; }
  // How many numbers the window gave up on (passed over without seeing them).
  uint64_t abandoned() const { return abandoned_; }

 private:
  bool Test(uint64_t seq) const { return (bits_[(seq % kWindow) / 64] >> (seq % 64)) & 1; }
  void Set(uint64_t seq) { bits_[(seq % kWindow) / 64] |= uint64_t{1} << (seq % 64); }
  void Clear(uint64_t seq) { bits_[(seq % kWindow) / 64] &= ~(uint64_t{1} << (seq % 64)); }
  // Moves floor_ to `new_floor`, clearing the bits it passes.
  void AdvanceFloor(uint64_t new_floor);

  uint64_t contiguous_ = 0;
  uint64_t floor_ = 0;
  uint64_t abandoned_ = 0;
  std::array<uint64_t, kWindow / 64> bits_{};
};

// SequenceWindows by producer id. Thread safety: thread-safe (one mutex); producers are never
// forgotten, so memory grows with the number of distinct producers (about 150 bytes each).
class SequenceDeduplicator {
 public:
  SequenceDeduplicator();
  ~SequenceDeduplicator();
  SequenceOutcome Observe(std::string_view producer, uint64_t seq);
  size_t producers() const;

 private:
  struct State;  // the windows by producer, under a mutex
  std::unique_ptr<State> state_;
};

}  // namespace idem
