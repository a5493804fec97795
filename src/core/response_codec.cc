#include "core/response_codec.h"

#include <cstdint>

namespace idem::internal {
namespace {

void PutLength(std::string& out, size_t n) {
  const auto v = static_cast<uint32_t>(n);
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}

bool GetString(std::string_view& in, std::string& out) {
  if (in.size() < 4) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  const uint32_t n = uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
  in.remove_prefix(4);
  if (in.size() < n) return false;
  out.assign(in.substr(0, n));
  in.remove_prefix(n);
  return true;
}

}  // namespace

std::string EncodeHeaders(const std::vector<Header>& headers) {
  size_t size = 0;
  for (const auto& [name, value] : headers) size += 8 + name.size() + value.size();
  std::string out;
  out.reserve(size);
  for (const auto& [name, value] : headers) {
    PutLength(out, name.size());
    out.append(name);
    PutLength(out, value.size());
    out.append(value);
  }
  return out;
}

Result<std::vector<Header>> DecodeHeaders(std::string_view encoded) {
  std::vector<Header> headers;
  while (!encoded.empty()) {
    Header header;
    if (!GetString(encoded, header.first) || !GetString(encoded, header.second)) {
      return DataLossError("stored response headers are truncated");
    }
    headers.push_back(std::move(header));
  }
  return headers;
}

}  // namespace idem::internal
