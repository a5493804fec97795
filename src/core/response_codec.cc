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

bool GetLength(std::string_view& in, uint32_t& n) {
  if (in.size() < 4) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  n = uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
  in.remove_prefix(4);
  return true;
}

bool GetString(std::string_view& in, std::string& out) {
  uint32_t n = 0;
  if (!GetLength(in, n) || in.size() < n) return false;
  out.assign(in.substr(0, n));
  in.remove_prefix(n);
  return true;
}

size_t EncodedHeadersSize(const std::vector<Header>& headers) {
  size_t size = 0;
  for (const auto& [name, value] : headers) size += 8 + name.size() + value.size();
  return size;
}

void AppendHeaders(std::string& out, const std::vector<Header>& headers) {
  for (const auto& [name, value] : headers) {
    PutLength(out, name.size());
    out.append(name);
    PutLength(out, value.size());
    out.append(value);
  }
}

}  // namespace

std::string EncodeHeaders(const std::vector<Header>& headers) {
  std::string out;
  out.reserve(EncodedHeadersSize(headers));
  AppendHeaders(out, headers);
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

std::string EncodeResponse(const StoredResponse& response) {
  const size_t headers_size = EncodedHeadersSize(response.headers);
  std::string out;
  out.reserve(8 + headers_size + response.body.size());
  PutLength(out, static_cast<uint32_t>(response.status));
  PutLength(out, headers_size);
  AppendHeaders(out, response.headers);
  out.append(response.body);
  return out;
}

Result<StoredResponse> DecodeResponse(std::string_view encoded) {
  uint32_t status = 0, headers_size = 0;
  if (!GetLength(encoded, status) || !GetLength(encoded, headers_size) ||
      encoded.size() < headers_size) {
    return DataLossError("stored response is truncated");
  }
  auto headers = DecodeHeaders(encoded.substr(0, headers_size));
  if (!headers.ok()) return headers.status();
  StoredResponse response;
  response.status = static_cast<int>(status);
  response.headers = std::move(*headers);
  response.body = std::string(encoded.substr(headers_size));
  return response;
}

}  // namespace idem::internal
