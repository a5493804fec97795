// Per-key order for `idem consume`: which fetched message may be delivered now. A pure
// bookkeeping class (stream sequences and keys, no NATS, no clock), unit-tested on its own.
//
// For each ordering key it tracks the stream sequences still outstanding: in flight (being
// delivered), held (fetched, waiting for an earlier one) and awaiting (not in this process's
// hands but not settled either: naked and due for redelivery, or left unacked by an earlier
// process). A message may be delivered when its sequence is the lowest outstanding one of its
// key and nothing of its key is in flight; so one message per key at a time, in stream order.
// Progress: the lowest unsettled message of the whole consumer is the lowest of its key once
// the ack floor below it has been applied (AdvanceAckFloor), so it is always deliverable.
//
// Thread safety: none; one thread owns an instance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "idem/outbox.h"

namespace idem::worker {

// The message header that carries a message's ordering key, the one `idem relay` sets from the
// outbox row's ordering key (idem::outbox::kOrderingKeyHeader). Messages without it are not
// ordered.
inline constexpr std::string_view kOrderingKeyHeader = outbox::kOrderingKeyHeader;

class KeyOrder {
 public:
  enum class Admit {
    kDeliverNow,       // now in flight: deliver it
    kHold,             // an earlier message of its key is outstanding: keep it until released
    kAlreadyHeld,      // a second copy of a held message (a redelivery): keep the newer copy
    kAlreadyInFlight,  // a second copy of a message in flight: drop the copy
  };
  struct Keyed {
    std::string key;
    uint64_t seq = 0;
    friend bool operator==(const Keyed&, const Keyed&) = default;
  };

  // A fetched message of `key` at stream sequence `seq`.
  Admit Add(const std::string& key, uint64_t seq);

  // The message in flight at `seq` was acked or terminated: it is no longer outstanding.
  // Returns the held message of the same key that is now in flight, if any.
  // REQUIRES: `seq` is in flight.
  std::optional<uint64_t> Finish(const std::string& key, uint64_t seq);

  // The message at `seq` (in flight or held) leaves this process unsettled (naked, its settle
  // failed, or given back): it stays outstanding as awaiting and keeps its successors held
  // until it comes back and is finished, or the ack floor passes it. Returns a held message of
  // the key that is now in flight, if any (only when an earlier one was held behind it).
  std::optional<uint64_t> Release(const std::string& key, uint64_t seq);

  // `seq` of `key` may be outstanding outside this process (an earlier process had it). No
  // effect on a sequence already known.
  void AddAwaiting(const std::string& key, uint64_t seq);

  // Every message at or below `floor` is acked or terminated: forgets the awaiting ones there.
  // Returns the held messages now in flight.
  std::vector<Keyed> AdvanceAckFloor(uint64_t floor);

  size_t held() const { return held_; }
  size_t in_flight() const { return in_flight_; }
  size_t awaiting() const { return awaiting_by_seq_.size(); }
  // How many messages of `key` are held (for log lines).
  size_t HeldOf(const std::string& key) const;
  // The lowest outstanding sequence of `key`, if any (for log lines).
  std::optional<uint64_t> LowestOf(const std::string& key) const;

 private:
  enum class State { kAwaiting, kHeld, kInFlight };
  struct KeyState {
    std::map<uint64_t, State> seqs;
    bool in_flight = false;
  };

  // Takes `seq` out of the counters of `state`, the state it is leaving (for another, or
  // for good).
  void LeaveState(KeyState& ks, uint64_t seq, State state);
  // Sets `state` of `seq`, keeping the counters right.
  void Set(KeyState& ks, const std::string& key, uint64_t seq, State state);
  void Erase(std::unordered_map<std::string, KeyState>::iterator it, uint64_t seq);
  // When nothing of the key is in flight and its lowest outstanding message is held, that one
  // goes in flight and is returned. Forgets a key with nothing outstanding.
  std::optional<uint64_t> Promote(std::unordered_map<std::string, KeyState>::iterator it);

  std::unordered_map<std::string, KeyState> keys_;
  std::map<uint64_t, std::string> awaiting_by_seq_;  // for AdvanceAckFloor
  size_t held_ = 0;
  size_t in_flight_ = 0;
};

}  // namespace idem::worker
