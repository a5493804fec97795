// The scope's store key, "tenant\0client\0key" (Scope::Encoded()), written into a buffer the
// caller reuses, for lookups that must not allocate.
#pragma once

#include <string>

#include "idem/scope.h"

namespace idem::internal {

// Replaces `out` with scope.Encoded(), reusing out's capacity.
inline void EncodeScopeInto(const Scope& scope, std::string& out) {
  out.clear();
  out.reserve(scope.tenant.size() + scope.client.size() + scope.key.size() + 2);
  out.append(scope.tenant).push_back('\0');
  out.append(scope.client).push_back('\0');
  out.append(scope.key);
}

// scope.Encoded() in a buffer of the calling thread's: no allocation once the buffer has grown
// to the keys' size. Valid until the same thread's next call.
inline const std::string& ScopeLookupKey(const Scope& scope) {
  thread_local std::string buffer;
  EncodeScopeInto(scope, buffer);
  return buffer;
}

}  // namespace idem::internal
