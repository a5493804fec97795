#include "store/settle_notice.h"

#include "core/response_codec.h"
#include "core/text.h"
#include "store/settle_listener.h"

namespace idem::internal {
namespace {

constexpr size_t kHexDigestChars = 64;
constexpr size_t kHexFingerprintChars = 2 * Fingerprint::kSize;

// A decimal byte count that fits in `payload` (a carried length can be no longer).
std::optional<size_t> LengthIn(std::string_view text, std::string_view payload) {
  auto length = ParseIntInRange("length", text, 0, static_cast<int64_t>(payload.size()));
  if (!length.ok()) return std::nullopt;
  return static_cast<size_t>(*length);
}

// Sets both carried parts, or neither.
void Carry(ParsedNotice& notice, Result<Fingerprint> fingerprint, std::string_view encoded) {
  if (!fingerprint.ok()) return;
  auto response = DecodeResponse(encoded);
  if (!response.ok()) return;
  notice.fingerprint = *fingerprint;
  notice.response = std::move(*response);
}

ParsedNotice KeyOnly(std::string_view payload) {
  ParsedNotice notice;
  notice.digest = DigestFromNotice(payload);
  return notice;
}

}  // namespace

SettleNotice ParsedNotice::view() const {
  SettleNotice notice;
  notice.scope_digest = digest;
  if (fingerprint && response) {
    notice.fingerprint = &*fingerprint;
    notice.response = &*response;
  }
  return notice;
}

ParsedNotice ParsePostgresNotice(std::string_view payload) {
  ParsedNotice notice = KeyOnly(payload);
  if (notice.digest.empty() || payload.size() <= kHexDigestChars) return notice;
  std::string_view rest = payload.substr(kHexDigestChars);
  if (rest.size() < 2 + kHexFingerprintChars || rest[0] != ' ' ||
      rest[1 + kHexFingerprintChars] != ' ') {
    return notice;
  }
  const std::string_view fingerprint = rest.substr(1, kHexFingerprintChars);
  rest.remove_prefix(2 + kHexFingerprintChars);
  const size_t space = rest.find(' ');
  if (space == std::string_view::npos) return notice;
  const auto length = LengthIn(rest.substr(0, space), payload);
  auto encoded = DecodeBase64(rest.substr(space + 1));
  if (length && encoded.ok() && encoded->size() == *length) {
    Carry(notice, Fingerprint::FromHex(fingerprint), *encoded);
  }
  return notice;
}

ParsedNotice ParseRedisNotice(std::string_view payload) {
  if (payload.empty() || payload[0] != '=') return KeyOnly(payload);
  const size_t colon = payload.find(':');
  if (colon == std::string_view::npos) return KeyOnly(payload);
  const auto length = LengthIn(payload.substr(1, colon - 1), payload);
  const std::string_view rest = payload.substr(colon + 1);
  if (!length || rest.size() < Fingerprint::kSize || rest.size() - Fingerprint::kSize < *length) {
    return KeyOnly(payload);
  }
  ParsedNotice notice = KeyOnly(rest.substr(Fingerprint::kSize + *length));
  if (!notice.digest.empty()) {
    Carry(notice, Fingerprint::FromRaw(rest.substr(0, Fingerprint::kSize)),
          rest.substr(Fingerprint::kSize, *length));
  }
  return notice;
}

}  // namespace idem::internal
