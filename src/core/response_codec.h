// A binary-safe encoding of stored response headers, shared by every store that keeps headers
// in one column or field. Header values may hold any byte (HTTP allows obs-text), and a replay
// must be byte-identical, so this is length-prefixed rather than JSON:
//   repeated: 4-byte big-endian name length, name, 4-byte big-endian value length, value
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "idem/record.h"
#include "idem/status.h"

namespace idem::internal {

std::string EncodeHeaders(const std::vector<Header>& headers);
// kDataLoss if `encoded` is truncated or malformed.
Result<std::vector<Header>> DecodeHeaders(std::string_view encoded);

// A whole response in one buffer, for stores that keep it as a single value:
//   4-byte big-endian status, 4-byte big-endian length of the encoded headers, the encoded
//   headers, then the body to the end.
std::string EncodeResponse(const StoredResponse& response);
Result<StoredResponse> DecodeResponse(std::string_view encoded);

}  // namespace idem::internal
