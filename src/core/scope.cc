#include "idem/scope.h"

#include <string>

#include "core/scope_digest.h"
#include "core/scope_key.h"
#include "core/text.h"
#include "idem/fingerprint.h"

namespace idem {

Status ValidateKey(std::string_view key) {
  if (key.empty()) return InvalidArgumentError("idempotency key is empty");
  if (key.size() > kMaxKeyLength) {
    return InvalidArgumentError("idempotency key has " + std::to_string(key.size()) +
                                " characters; at most " + std::to_string(kMaxKeyLength) +
                                " are allowed");
  }
  for (size_t i = 0; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c < 0x21 || c > 0x7e) {
      return InvalidArgumentError("idempotency key has a character that is not visible ASCII "
                                  "at offset " + std::to_string(i));
    }
  }
  return Status::Ok();
}

namespace {

Status ValidatePart(std::string_view name, std::string_view value) {
  if (value.size() > kMaxScopePartLength) {
    return InvalidArgumentError(std::string(name) + " has " + std::to_string(value.size()) +
                                " bytes; at most " + std::to_string(kMaxScopePartLength) +
                                " are allowed");
  }
  if (value.find('\0') != std::string_view::npos) {
    return InvalidArgumentError(std::string(name) + " contains a NUL byte");
  }
  return Status::Ok();
}

}  // namespace

Result<Scope> Scope::Make(std::string tenant, std::string client, std::string key) {
  IDEM_RETURN_IF_ERROR(ValidateKey(key));
  IDEM_RETURN_IF_ERROR(ValidatePart("tenant", tenant));
  IDEM_RETURN_IF_ERROR(ValidatePart("client", client));
  return Scope{std::move(tenant), std::move(client), std::move(key)};
}

std::string Scope::Encoded() const {
  std::string encoded;
  internal::EncodeScopeInto(*this, encoded);
  return encoded;
}

std::string Scope::Digest() const { return internal::ScopeDigest(*this).str(); }

namespace internal {

ScopeDigest::ScopeDigest(const Scope& scope) {
  using namespace std::string_view_literals;
  // The digest of Encoded(), without building it: the first 8 bytes, in hex.
  auto bytes = Sha256Of({scope.tenant, "\0"sv, scope.client, "\0"sv, scope.key});
  if (!bytes.ok()) {
    constexpr std::string_view kUnavailable = "digest-unavailable";
    static_assert(kUnavailable.size() <= sizeof text_);
    kUnavailable.copy(text_.data(), kUnavailable.size());
    size_ = static_cast<uint8_t>(kUnavailable.size());
    return;
  }
  constexpr size_t kChars = 16;
  ToHexInto(bytes->data(), kChars / 2, text_.data());
  size_ = kChars;
}

}  // namespace internal

}  // namespace idem
