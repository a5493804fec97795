#include "idem/fingerprint.h"

// SHA-256 through OpenSSL's one-algorithm API, deprecated in OpenSSL 3 in favour of EVP: an EVP
// context costs two heap allocations per digest even when reused, and the gateway takes three
// digests per request. The algorithm and its output are the same.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#include <algorithm>
#include <memory>
#include <string>

#include "core/scope_digest.h"
#include "core/text.h"

namespace idem {
namespace {

constexpr uint8_t kEncodingVersion = 0x01;

class Hasher {
 public:
  Hasher() { ok_ = SHA256_Init(&ctx_) == 1; }

  void Update(std::string_view data) {
    if (ok_ && !data.empty()) ok_ = SHA256_Update(&ctx_, data.data(), data.size()) == 1;
  }

  void Part(char tag, std::string_view data) {
    char header[9];
    header[0] = tag;
    uint64_t n = data.size();
    for (int i = 8; i >= 1; --i) {
      header[i] = static_cast<char>(n & 0xff);
      n >>= 8;
    }
    Update(std::string_view(header, sizeof header));
    Update(data);
  }

  Result<Fingerprint::Bytes> Finish() {
    static_assert(sizeof(Fingerprint::Bytes) == SHA256_DIGEST_LENGTH);
    Fingerprint::Bytes out{};
    if (!ok_ || SHA256_Final(out.data(), &ctx_) != 1) {
      return InternalError("OpenSSL SHA-256 failed");
    }
    return out;
  }

 private:
  SHA256_CTX ctx_;
  bool ok_ = false;
};

std::string ToLower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), internal::AsciiLower);
  return out;
}

}  // namespace

Result<Fingerprint> Fingerprint::FromHex(std::string_view hex) {
  if (hex.size() != kSize * 2) {
    return InvalidArgumentError("fingerprint must be 64 hex characters, got " +
                                std::to_string(hex.size()));
  }
  Bytes bytes{};
  for (size_t i = 0; i < kSize; ++i) {
    const int hi = internal::HexValue(hex[2 * i]);
    const int lo = internal::HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgumentError("fingerprint has a non-hex character");
    bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return Fingerprint(bytes);
}

Result<Fingerprint> Fingerprint::FromRaw(std::string_view raw) {
  if (raw.size() != kSize) {
    return DataLossError("stored fingerprint has " + std::to_string(raw.size()) +
                         " bytes, expected 32");
  }
  Bytes bytes{};
  std::copy(raw.begin(), raw.end(), reinterpret_cast<char*>(bytes.data()));
  return Fingerprint(bytes);
}

std::string Fingerprint::ToHex() const { return internal::ToHex(bytes_.data(), bytes_.size()); }

Result<Fingerprint> ComputeFingerprint(const FingerprintPolicy& policy,
                                       const RequestParts& request) {
  Hasher hasher;
  const char version = static_cast<char>(kEncodingVersion);
  hasher.Update(std::string_view(&version, 1));
  if (policy.method) hasher.Part('M', request.method);
  if (policy.path) hasher.Part('P', request.path);
  if (policy.query) hasher.Part('Q', request.query);
  if (policy.body) hasher.Part('B', request.body);

  if (!policy.headers.empty()) {
    std::vector<std::string> names;
    names.reserve(policy.headers.size());
    for (const auto& name : policy.headers) names.push_back(ToLower(name));
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    for (const auto& name : names) {
      std::string joined;
      bool present = false;
      for (const auto& [header_name, value] : request.headers) {
        if (!internal::EqualsIgnoreCase(header_name, name)) continue;
        if (present) joined.push_back(',');
        joined.append(internal::TrimOws(value));
        present = true;
      }
      if (present) {
        hasher.Part('H', name);
        hasher.Part('V', joined);
      } else {
        hasher.Part('h', name);
      }
    }
  }
  auto bytes = hasher.Finish();
  if (!bytes.ok()) return bytes.status();
  return Fingerprint(*bytes);
}

Result<std::string> Sha256Hex(std::string_view data) { return Sha256HexOf({data}); }

Result<std::string> Sha256HexOf(std::initializer_list<std::string_view> parts,
                                size_t hex_chars) {
  auto bytes = internal::Sha256Of(parts);
  if (!bytes.ok()) return bytes.status();
  const size_t n = std::min<size_t>(hex_chars, 2 * bytes->size());
  std::string hex = internal::ToHex(bytes->data(), (n + 1) / 2);
  hex.resize(n);
  return hex;
}

namespace internal {

Result<Fingerprint::Bytes> Sha256Of(std::initializer_list<std::string_view> parts) {
  Hasher hasher;
  for (std::string_view part : parts) hasher.Update(part);
  return hasher.Finish();
}

}  // namespace internal

}  // namespace idem
