#include "core/text.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <openssl/evp.h>

namespace idem::internal {

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> ListElements(std::string_view value) {
  std::vector<std::string_view> out;
  while (true) {
    const size_t comma = value.find(',');
    const std::string_view element = TrimOws(value.substr(0, comma));
    if (!element.empty()) out.push_back(element);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> PercentDecode(std::string_view text, PercentForm form) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '+' && form == PercentForm::kQuery) {
      out.push_back(' ');
    } else if (c != '%') {
      out.push_back(c);
    } else if (i + 2 < text.size() && HexValue(text[i + 1]) >= 0 && HexValue(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2])));
      i += 2;
    } else if (form == PercentForm::kStrict) {
      return std::nullopt;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string ToHex(const uint8_t* data, size_t n) {
  std::string out(2 * n, '0');
  ToHexInto(data, n, out.data());
  return out;
}

void ToHexInto(const uint8_t* data, size_t n, char* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[data[i] >> 4];
    out[2 * i + 1] = kHex[data[i] & 0x0f];
  }
}

Result<int64_t> ParseIntInRange(std::string_view what, std::string_view text, int64_t min,
                                int64_t max) {
  int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value < min ||
      value > max) {
    return InvalidArgumentError(std::string(what) + " must be " + std::to_string(min) + " to " +
                                std::to_string(max) + " (an integer), not '" + std::string(text) +
                                "'");
  }
  return value;
}

Status ForEachQueryOption(
    std::string_view query,
    const std::function<Status(std::string_view name, std::string_view value)>& apply) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgumentError("option '" + std::string(item) + "' has no value");
    }
    IDEM_RETURN_IF_ERROR(apply(item.substr(0, eq), item.substr(eq + 1)));
  }
  return Status::Ok();
}

std::string RedactUrlPassword(std::string_view url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return std::string(url);
  const size_t authority = scheme_end + 3;
  const size_t authority_end = url.find_first_of("/?#", authority);
  const size_t at = url.substr(0, authority_end).rfind('@');
  if (at == std::string_view::npos || at < authority) return std::string(url);
  const size_t colon = url.substr(0, at).find(':', authority);
  // "user@host" has no password; "secret@host" (Redis's bare password) is hidden whole.
  const size_t secret_begin = colon == std::string_view::npos ? authority : colon + 1;
  if (colon == std::string_view::npos && url.substr(0, scheme_end) != "redis") {
    return std::string(url);
  }
  return std::string(url.substr(0, secret_begin)) + "***" + std::string(url.substr(at));
}

Result<std::string> DecodeBase64(std::string_view text) {
  if (text.size() % 4 != 0) {
    return InvalidArgumentError("base64 text has " + std::to_string(text.size()) +
                                " characters, not a multiple of 4");
  }
  const size_t padding = text.ends_with("==") ? 2 : text.ends_with('=') ? 1 : 0;
  for (size_t i = 0; i < text.size() - padding; ++i) {
    const char c = text[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/')) {
      return InvalidArgumentError("base64 text has an invalid character at offset " +
                                  std::to_string(i));
    }
  }
  std::string out(text.size() / 4 * 3, '\0');
  if (text.empty()) return out;
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return InvalidArgumentError("base64 text cannot be decoded");
  out.resize(static_cast<size_t>(n) - padding);  // EVP_DecodeBlock counts padding as zeros
  return out;
}

std::string EncodeBase64(std::string_view data) {
  std::string out((data.size() + 2) / 3 * 4 + 1, '\0');  // EVP_EncodeBlock writes a NUL
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(data.data()),
                                static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

bool ValidUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return false;
    }
    if (static_cast<size_t>(end - p) < n) return false;
    if (p[1] < lo || p[1] > hi) return false;
    for (size_t i = 2; i < n; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
    }
    p += n;
  }
  return true;
}

}  // namespace idem::internal
