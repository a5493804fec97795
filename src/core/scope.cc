#include "idem/scope.h"

#include <string>

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
  encoded.reserve(tenant.size() + client.size() + key.size() + 2);
  encoded.append(tenant).push_back('\0');
  encoded.append(client).push_back('\0');
  encoded.append(key);
  return encoded;
}

std::string Scope::Digest() const {
  using namespace std::string_view_literals;
  // The digest of Encoded(), without building it.
  auto hex = Sha256HexOf({tenant, "\0"sv, client, "\0"sv, key}, 16);
  return hex.ok() ? std::move(*hex) : std::string("digest-unavailable");
}

}  // namespace idem
