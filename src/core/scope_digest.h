// Scope::Digest() held inline: its 16 hex characters in the object itself, where a std::string
// of that length reaches the heap. For a digest made on every request (the gateway's log line
// and its waiters' keys).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "idem/fingerprint.h"
#include "idem/scope.h"
#include "idem/status.h"

namespace idem::internal {

// SHA-256 of the concatenation of `parts`, without a heap allocation.
Result<Fingerprint::Bytes> Sha256Of(std::initializer_list<std::string_view> parts);

class ScopeDigest {
 public:
  ScopeDigest() = default;  // empty: a request without a key
  // The same characters as scope.Digest().
  explicit ScopeDigest(const Scope& scope);

  std::string_view view() const { return {text_.data(), size_}; }
  operator std::string_view() const { return view(); }  // NOLINT: a digest reads as its text
  std::string str() const { return std::string(view()); }
  bool empty() const { return size_ == 0; }

 private:
  std::array<char, 18> text_{};  // 16 hex characters, or "digest-unavailable"
  uint8_t size_ = 0;
};

}  // namespace idem::internal
