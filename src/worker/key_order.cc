#include "worker/key_order.h"

namespace idem::worker {

void KeyOrder::LeaveState(KeyState& ks, uint64_t seq, State state) {
  switch (state) {
    case State::kAwaiting: awaiting_by_seq_.erase(seq); break;
    case State::kHeld: --held_; break;
    case State::kInFlight:
      --in_flight_;
      ks.in_flight = false;
      break;
  }
}

void KeyOrder::Set(KeyState& ks, const std::string& key, uint64_t seq, State state) {
  auto [it, inserted] = ks.seqs.try_emplace(seq, state);
  if (!inserted) {
    LeaveState(ks, seq, it->second);
    it->second = state;
  }
  switch (state) {
    case State::kAwaiting: awaiting_by_seq_[seq] = key; break;
    case State::kHeld: ++held_; break;
    case State::kInFlight:
      ++in_flight_;
      ks.in_flight = true;
      break;
  }
}

void KeyOrder::Erase(std::unordered_map<std::string, KeyState>::iterator it, uint64_t seq) {
  KeyState& ks = it->second;
  auto s = ks.seqs.find(seq);
  if (s == ks.seqs.end()) return;
  LeaveState(ks, seq, s->second);
  ks.seqs.erase(s);
}

std::optional<uint64_t> KeyOrder::Promote(std::unordered_map<std::string, KeyState>::iterator it) {
  KeyState& ks = it->second;
  if (ks.seqs.empty()) {
    keys_.erase(it);
    return std::nullopt;
  }
  if (ks.in_flight) return std::nullopt;
  auto lowest = ks.seqs.begin();
  if (lowest->second != State::kHeld) return std::nullopt;
  const uint64_t seq = lowest->first;
  Set(ks, it->first, seq, State::kInFlight);
  return seq;
}

KeyOrder::Admit KeyOrder::Add(const std::string& key, uint64_t seq) {
  auto it = keys_.try_emplace(key).first;
  KeyState& ks = it->second;
  if (auto s = ks.seqs.find(seq); s != ks.seqs.end()) {
    if (s->second == State::kHeld) return Admit::kAlreadyHeld;
    if (s->second == State::kInFlight) return Admit::kAlreadyInFlight;
  }
  Set(ks, key, seq, State::kHeld);
  if (auto promoted = Promote(it); promoted == seq) return Admit::kDeliverNow;
  return Admit::kHold;
}

std::optional<uint64_t> KeyOrder::Finish(const std::string& key, uint64_t seq) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return std::nullopt;
  Erase(it, seq);
  return Promote(it);
}

std::optional<uint64_t> KeyOrder::Release(const std::string& key, uint64_t seq) {
  auto it = keys_.find(key);
  if (it == keys_.end()) it = keys_.try_emplace(key).first;
  Set(it->second, key, seq, State::kAwaiting);
  return Promote(it);
}

void KeyOrder::AddAwaiting(const std::string& key, uint64_t seq) {
  auto it = keys_.try_emplace(key).first;
  if (it->second.seqs.contains(seq)) return;
  Set(it->second, key, seq, State::kAwaiting);
}

std::vector<KeyOrder::Keyed> KeyOrder::AdvanceAckFloor(uint64_t floor) {
  std::vector<Keyed> now;
  while (!awaiting_by_seq_.empty() && awaiting_by_seq_.begin()->first <= floor) {
    const uint64_t seq = awaiting_by_seq_.begin()->first;
    const std::string key = awaiting_by_seq_.begin()->second;
    auto it = keys_.find(key);
    if (it == keys_.end()) {  // cannot happen: every awaiting entry belongs to a key
      awaiting_by_seq_.erase(awaiting_by_seq_.begin());
      continue;
    }
    Erase(it, seq);
    if (auto promoted = Promote(it)) now.push_back({key, *promoted});
  }
  return now;
}

size_t KeyOrder::HeldOf(const std::string& key) const {
  auto it = keys_.find(key);
  if (it == keys_.end()) return 0;
  size_t n = 0;
  for (const auto& [seq, state] : it->second.seqs) n += state == State::kHeld ? 1 : 0;
  return n;
}

std::optional<uint64_t> KeyOrder::LowestOf(const std::string& key) const {
  auto it = keys_.find(key);
  if (it == keys_.end() || it->second.seqs.empty()) return std::nullopt;
  return it->second.seqs.begin()->first;
}

}  // namespace idem::worker
