#include "outbox/ordering_key_header.h"

#include <algorithm>

#include "core/text.h"
#include "idem/outbox.h"

namespace idem::outbox {
namespace {

bool IsControl(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 0x01 && u <= 0x1f) || u == 0x7f;
}

bool IsOrderingKeyHeader(std::string_view name) {
  return internal::EqualsIgnoreCase(name, kOrderingKeyHeader);
}

}  // namespace

std::string OrderingKeyHeaderValue(std::string_view key) {
  if (std::none_of(key.begin(), key.end(), IsControl)) return std::string(key);
  constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size() + 8);
  for (char c : key) {
    if (IsControl(c) || c == '%') {
      const auto u = static_cast<unsigned char>(c);
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

bool SetOrderingKeyHeader(std::vector<std::pair<std::string, std::string>>& headers,
                          const std::optional<std::string>& key) {
  const auto own = std::remove_if(headers.begin(), headers.end(),
                                  [](const auto& h) { return IsOrderingKeyHeader(h.first); });
  const bool dropped = own != headers.end();
  headers.erase(own, headers.end());
  if (key) headers.emplace_back(kOrderingKeyHeader, OrderingKeyHeaderValue(*key));
  return dropped;
}

}  // namespace idem::outbox
