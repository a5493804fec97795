#include "store/settle_notice.h"

#include <charconv>

#include "core/response_codec.h"
#include "core/text.h"
#include "store/settle_listener.h"

namespace idem::internal {
namespace {

constexpr size_t kHexDigestChars = 64;
constexpr size_t kHexFingerprintChars = 2 * Fingerprint::kSize;

std::optional<std::string> FromHex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string raw(hex.size() / 2, '\0');
  for (size_t i = 0; i < raw.size(); ++i) {
    const int high = HexValue(hex[2 * i]), low = HexValue(hex[2 * i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    raw[i] = static_cast<char>(high * 16 + low);
  }
  return raw;
}

// A decimal byte count, digits only.
std::optional<size_t> ParseLength(std::string_view text) {
  size_t length = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), length);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return length;
}

// Sets both carried parts, or neither.
void Carry(ParsedNotice& notice, std::string_view raw_fingerprint, std::string_view encoded) {
  auto fingerprint = Fingerprint::FromRaw(raw_fingerprint);
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

Store::SettleNotice ParsedNotice::view() const {
  Store::SettleNotice notice;
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
  auto fingerprint = FromHex(rest.substr(1, kHexFingerprintChars));
  rest.remove_prefix(2 + kHexFingerprintChars);
  const size_t space = rest.find(' ');
  auto length = ParseLength(rest.substr(0, space));
  if (!fingerprint || !length || space == std::string_view::npos) return notice;
  auto encoded = DecodeBase64(rest.substr(space + 1));
  if (encoded.ok() && encoded->size() == *length) Carry(notice, *fingerprint, *encoded);
  return notice;
}

ParsedNotice ParseRedisNotice(std::string_view payload) {
  if (payload.empty() || payload[0] != '=') return KeyOnly(payload);
  const size_t colon = payload.find(':');
  if (colon == std::string_view::npos) return KeyOnly(payload);
  const auto length = ParseLength(payload.substr(1, colon - 1));
  const std::string_view rest = payload.substr(colon + 1);
  if (!length || rest.size() < Fingerprint::kSize || rest.size() - Fingerprint::kSize < *length) {
    return KeyOnly(payload);
  }
  ParsedNotice notice = KeyOnly(rest.substr(Fingerprint::kSize + *length));
  if (!notice.digest.empty()) {
    Carry(notice, rest.substr(0, Fingerprint::kSize), rest.substr(Fingerprint::kSize, *length));
  }
  return notice;
}

}  // namespace idem::internal
