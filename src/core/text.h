// Small text helpers shared by the core, the stores, the gateway and the client: ASCII case
// folding, hex, and the "name=value&name=value" option lists of store URLs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idem/status.h"

namespace idem::internal {

// The characters of an HTTP token (RFC 9110 5.6.2 tchar: ASCII letters, digits and
// "!#$%&'*+-.^_`|~"), by byte: checked for every character of every header name.
inline constexpr std::array<bool, 256> kHttpTokenChars = [] {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = t[c - 'a' + 'A'] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();
inline bool IsHttpTokenChar(char c) { return kHttpTokenChars[static_cast<unsigned char>(c)]; }
// Whether `s` is an HTTP token (one or more tchar): a header name, a method.
inline bool IsHttpToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsHttpTokenChar(c)) return false;
  }
  return true;
}

// `c` with ASCII letters folded to lower case; every other byte as it is (no locale).
constexpr char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

// ASCII case-insensitive equality (HTTP header names, tokens). Inline: the gateway compares
// header names with it on every request.
inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

// `s` without the spaces and tabs around it (HTTP's optional whitespace, RFC 9110 5.6.3).
std::string_view TrimOws(std::string_view s);

// The non-empty elements of a comma-separated list (RFC 9110 5.6.1), trimmed. Views into `value`.
std::vector<std::string_view> ListElements(std::string_view value);

// The value of one hex digit (either case), or -1.
int HexValue(char c);

// How PercentDecode treats what is not a plain %XX escape.
enum class PercentForm {
  // A query string's form encoding: '+' is a space, and a '%' without two hex digits after it
  // is kept as written.
  kQuery,
  // A URL component such as userinfo: '+' is itself, and a '%' without two hex digits after it
  // is an error.
  kStrict,
};

// Decodes the %XX escapes (hex digits of either case) of `text`. nullopt only in kStrict form,
// for a malformed or truncated escape.
std::optional<std::string> PercentDecode(std::string_view text, PercentForm form);

// Lower-case hex of `n` bytes.
std::string ToHex(const uint8_t* data, size_t n);
// The same into `out`, which must have room for 2 * n characters.
void ToHexInto(const uint8_t* data, size_t n, char* out);

// Standard base64 (RFC 4648 section 4, with padding) decoded; kInvalidArgument saying what is
// wrong when `text` is not that ("base64 text has 5 characters, not a multiple of 4").
Result<std::string> DecodeBase64(std::string_view text);

// `data` in standard base64 (RFC 4648 section 4, with padding): what DecodeBase64 reads back.
std::string EncodeBase64(std::string_view data);

// True when `text` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
// above U+10FFFF), so it can go into a JSON string as it is.
bool ValidUtf8(std::string_view text);

// Parses `text` as a decimal integer in [min, max]; otherwise kInvalidArgument
// "WHAT must be MIN to MAX (an integer), not 'TEXT'".
Result<int64_t> ParseIntInRange(std::string_view what, std::string_view text, int64_t min,
                                int64_t max);

// Calls `apply(name, value)` for each "name=value" of `query`, split at '&' (empty items are
// skipped); stops at the first error. An item without '=' is kInvalidArgument ("option 'x' has
// no value"). Values are taken as written, without percent-decoding.
Status ForEachQueryOption(
    std::string_view query,
    const std::function<Status(std::string_view name, std::string_view value)>& apply);

// `url` with the password of its userinfo ("scheme://user:PASSWORD@host...") replaced by
// "***", for logs and error messages. URLs without one are returned unchanged.
std::string RedactUrlPassword(std::string_view url);

}  // namespace idem::internal
