#include "gateway/http.h"

#include <vector>

namespace idem::gateway {

template <bool kIsRequest>
void StripHopByHop(http::header<kIsRequest, http::fields>& h) {
  std::vector<std::string> named;
  for (auto it = h.find(http::field::connection); it != h.end() && it->name() == http::field::connection;
       ++it) {
    std::string_view value = it->value();
    while (!value.empty()) {
      const size_t comma = value.find(',');
      std::string_view token = value.substr(0, comma);
      while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) token.remove_prefix(1);
      while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
      if (!token.empty()) named.emplace_back(token);
      value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    }
  }
  for (const auto& name : named) h.erase(name);
  for (auto field : {http::field::connection, http::field::keep_alive,
                     http::field::proxy_authenticate, http::field::proxy_authorization,
                     http::field::proxy_connection, http::field::te, http::field::trailer,
                     http::field::transfer_encoding, http::field::upgrade}) {
    h.erase(field);
  }
}

template void StripHopByHop<true>(http::header<true, http::fields>&);
template void StripHopByHop<false>(http::header<false, http::fields>&);

std::string_view TargetPath(std::string_view target) {
  return target.substr(0, target.find('?'));
}

std::string_view TargetQuery(std::string_view target) {
  const size_t q = target.find('?');
  return q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
}

std::string PercentDecode(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string QueryParam(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t eq = pair.find('=');
    if (PercentDecode(pair.substr(0, eq)) == name) {
      return eq == std::string_view::npos ? std::string() : PercentDecode(pair.substr(eq + 1));
    }
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
  }
  return {};
}

}  // namespace idem::gateway
