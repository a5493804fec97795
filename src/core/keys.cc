#include "idem/keys.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cctype>

#include "core/mutex.h"
#include "core/text.h"

namespace idem {
namespace {

constexpr int64_t kMaxMillis = (int64_t{1} << 48) - 1;
constexpr uint64_t kRandBMask = (uint64_t{1} << 62) - 1;
constexpr std::string_view kCrockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

Status RandomBytes(uint8_t* out, size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1) return InternalError("RAND_bytes failed");
  return Status::Ok();
}

Result<uint64_t> RandomU64() {
  uint8_t b[8];
  IDEM_RETURN_IF_ERROR(RandomBytes(b, sizeof b));
  uint64_t v = 0;
  for (uint8_t x : b) v = (v << 8) | x;
  return v;
}

constexpr Uuid MakeConstant(const char (&hex)[33]) {
  Uuid u;
  for (size_t i = 0; i < 16; ++i) {
    auto nibble = [](char c) -> uint8_t {
      return static_cast<uint8_t>(c <= '9' ? c - '0' : c - 'a' + 10);
    };
    u.bytes[i] = static_cast<uint8_t>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  }
  return u;
}

int64_t BigEndian48(const uint8_t* p) {
  int64_t v = 0;
  for (int i = 0; i < 6; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

const Uuid kNamespaceDns = MakeConstant("6ba7b8109dad11d180b400c04fd430c8");
const Uuid kNamespaceUrl = MakeConstant("6ba7b8119dad11d180b400c04fd430c8");
const Uuid kNamespaceOid = MakeConstant("6ba7b8129dad11d180b400c04fd430c8");
const Uuid kNamespaceX500 = MakeConstant("6ba7b8149dad11d180b400c04fd430c8");

std::string Uuid::ToString() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (size_t i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out.push_back(kHex[bytes[i] >> 4]);
    out.push_back(kHex[bytes[i] & 0xF]);
  }
  return out;
}

Result<Uuid> ParseUuid(std::string_view text) {
  if (text.size() != 36) {
    return InvalidArgumentError("a UUID has 36 characters (8-4-4-4-12 hex digits), not " +
                                std::to_string(text.size()));
  }
  Uuid u;
  size_t byte = 0;
  for (size_t i = 0; i < 36;) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (text[i] != '-') return InvalidArgumentError("a UUID has '-' at position " + std::to_string(i));
      ++i;
      continue;
    }
    const int hi = internal::HexValue(text[i]);
    const int lo = internal::HexValue(text[i + 1]);
    if (hi < 0 || lo < 0) {
      return InvalidArgumentError("a UUID has only hex digits and '-', not '" +
                                  std::string(1, hi < 0 ? text[i] : text[i + 1]) + "'");
    }
    u.bytes[byte++] = static_cast<uint8_t>(hi << 4 | lo);
    i += 2;
  }
  return u;
}

Result<Uuid> ParseNamespace(std::string_view text) {
  if (text == "dns") return kNamespaceDns;
  if (text == "url") return kNamespaceUrl;
  if (text == "oid") return kNamespaceOid;
  if (text == "x500") return kNamespaceX500;
  auto u = ParseUuid(text);
  if (!u.ok()) {
    return InvalidArgumentError("namespace '" + std::string(text) +
                                "' is neither dns, url, oid, x500 nor a UUID: " +
                                u.status().message());
  }
  return u;
}

Result<Uuid> NewUuidV4() {
  Uuid u;
  IDEM_RETURN_IF_ERROR(RandomBytes(u.bytes.data(), u.bytes.size()));
  u.bytes[6] = static_cast<uint8_t>((u.bytes[6] & 0x0F) | 0x40);
  u.bytes[8] = static_cast<uint8_t>((u.bytes[8] & 0x3F) | 0x80);
  return u;
}

Result<Uuid> UuidV5(const Uuid& ns, std::string_view name) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha1(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), ns.bytes.data(), ns.bytes.size()) != 1 ||
      EVP_DigestUpdate(ctx.get(), name.data(), name.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest, &length) != 1 || length < 16) {
    return InternalError("SHA-1 for UUIDv5 failed");
  }
  Uuid u;
  std::copy(digest, digest + 16, u.bytes.begin());
  u.bytes[6] = static_cast<uint8_t>((u.bytes[6] & 0x0F) | 0x50);
  u.bytes[8] = static_cast<uint8_t>((u.bytes[8] & 0x3F) | 0x80);
  return u;
}

Result<Uuid> IntentKey(const Uuid& ns, std::string_view intent) {
  size_t i = 0;
  if (intent.empty() || intent[0] != 'v') i = std::string_view::npos;
  if (i == 0) {
    i = 1;
    while (i < intent.size() && std::isdigit(static_cast<unsigned char>(intent[i]))) ++i;
    if (i == 1 || i >= intent.size() || intent[i] != ':' || i + 1 == intent.size()) {
      i = std::string_view::npos;
    }
  }
  if (i == std::string_view::npos) {
    return InvalidArgumentError("intent '" + std::string(intent) +
                                "' must start with a version tag and say what the action is, "
                                "as in v1:order:123:charge");
  }
  return UuidV5(ns, intent);
}

Uuid MakeUuidV7(int64_t unix_ms, uint16_t rand_a, uint64_t rand_b) {
  Uuid u;
  for (int i = 0; i < 6; ++i) u.bytes[i] = static_cast<uint8_t>(unix_ms >> (8 * (5 - i)));
  u.bytes[6] = static_cast<uint8_t>(0x70 | ((rand_a >> 8) & 0x0F));
  u.bytes[7] = static_cast<uint8_t>(rand_a);
  u.bytes[8] = static_cast<uint8_t>(0x80 | ((rand_b >> 56) & 0x3F));
  for (int i = 9; i < 16; ++i) u.bytes[i] = static_cast<uint8_t>(rand_b >> (8 * (15 - i)));
  return u;
}

Result<TimePoint> UuidV7Time(std::string_view text) {
  auto u = ParseUuid(text);
  if (!u.ok()) return u.status();
  if (u->version() != 7 || (u->bytes[8] & 0xC0) != 0x80) {
    return InvalidArgumentError("'" + std::string(text) + "' is a UUID but not a version 7 UUID");
  }
  return FromMillis(BigEndian48(u->bytes.data()));
}

struct UuidV7Generator::State {
  Mutex mu;
  int64_t last_ms IDEM_GUARDED_BY(mu) = -1;
  uint64_t rand_hi IDEM_GUARDED_BY(mu) = 0;  // rand_a, 12 bits
  uint64_t rand_lo IDEM_GUARDED_BY(mu) = 0;  // rand_b, 62 bits
};

UuidV7Generator::UuidV7Generator(std::shared_ptr<Clock> clock)
    : clock_(std::move(clock)), state_(std::make_unique<State>()) {}
UuidV7Generator::~UuidV7Generator() = default;

Result<Uuid> UuidV7Generator::Next() {
  const int64_t now = ToMillis(clock_->Now());
  State& s = *state_;
  MutexLock lock(s.mu);
  bool fresh = now > s.last_ms;
  if (!fresh) {
    auto step = RandomU64();
    if (!step.ok()) return step.status();
    s.rand_lo += (*step & 0xFFFFFFFF) + 1;
    if (s.rand_lo > kRandBMask) {
      s.rand_lo &= kRandBMask;
      if (++s.rand_hi > 0xFFF) {
        // 2^41 UUIDs in one millisecond: borrow the next millisecond (stays monotonic).
        ++s.last_ms;
        fresh = true;
      }
    }
  } else {
    s.last_ms = now;
  }
  if (fresh) {
    auto r = RandomU64();
    if (!r.ok()) return r.status();
    s.rand_hi = (*r >> 52) & 0x7FF;  // top bit clear: room to count up
    auto r2 = RandomU64();
    if (!r2.ok()) return r2.status();
    s.rand_lo = *r2 & kRandBMask;
  }
  if (s.last_ms > kMaxMillis) return InternalError("clock beyond the UUIDv7 range");
  return MakeUuidV7(s.last_ms, static_cast<uint16_t>(s.rand_hi), s.rand_lo);
}

Result<Uuid> NewUuidV7() {
  static UuidV7Generator generator;
  return generator.Next();
}

Result<std::string> EncodeUlid(int64_t unix_ms, const std::array<uint8_t, 10>& random) {
  if (unix_ms < 0 || unix_ms > kMaxMillis) {
    return InvalidArgumentError("a ULID timestamp is between 0 and 2^48-1 ms");
  }
  unsigned __int128 v = static_cast<uint64_t>(unix_ms);
  for (uint8_t b : random) v = (v << 8) | b;
  std::string out(26, '0');
  for (int i = 25; i >= 0; --i) {
    out[static_cast<size_t>(i)] = kCrockford[static_cast<size_t>(v & 31)];
    v >>= 5;
  }
  return out;
}

Result<TimePoint> UlidTime(std::string_view text) {
  if (text.size() != 26) {
    return InvalidArgumentError("a ULID has 26 characters, not " + std::to_string(text.size()));
  }
  unsigned __int128 v = 0;
  for (char c : text) {
    const size_t digit =
        kCrockford.find(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
    if (digit == std::string_view::npos) {
      return InvalidArgumentError("a ULID has only Crockford base32 characters, not '" +
                                  std::string(1, c) + "'");
    }
    v = (v << 5) | digit;
  }
  if (text[0] > '7') return InvalidArgumentError("a ULID starts with 0 to 7 (it is 128 bits)");
  return FromMillis(static_cast<int64_t>(v >> 80));
}

struct UlidGenerator::State {
  Mutex mu;
  int64_t last_ms IDEM_GUARDED_BY(mu) = -1;
  std::array<uint8_t, 10> random IDEM_GUARDED_BY(mu){};
};

UlidGenerator::UlidGenerator(std::shared_ptr<Clock> clock)
    : clock_(std::move(clock)), state_(std::make_unique<State>()) {}
UlidGenerator::~UlidGenerator() = default;

Result<std::string> UlidGenerator::Next() {
  const int64_t now = ToMillis(clock_->Now());
  State& s = *state_;
  MutexLock lock(s.mu);
  if (now > s.last_ms) {
    IDEM_RETURN_IF_ERROR(RandomBytes(s.random.data(), s.random.size()));
    s.last_ms = now;
  } else {
    // Same millisecond (or the clock stepped back): increment the random part by one.
    int i = static_cast<int>(s.random.size()) - 1;
    while (i >= 0 && ++s.random[static_cast<size_t>(i)] == 0) --i;
    if (i < 0) return ResourceExhaustedError("ULID random part overflowed within one millisecond");
  }
  return EncodeUlid(s.last_ms, s.random);
}

Result<std::string> NewUlid() {
  static UlidGenerator generator;
  return generator.Next();
}

Result<KeyFormat> ParseKeyFormat(std::string_view name) {
  if (name == "any") return KeyFormat::kAny;
  if (name == "uuidv7") return KeyFormat::kUuidV7;
  if (name == "ulid") return KeyFormat::kUlid;
  return InvalidArgumentError("key format '" + std::string(name) +
                              "' is not one of \"any\", \"uuidv7\", \"ulid\"");
}

std::string_view KeyFormatName(KeyFormat format) {
  switch (format) {
    case KeyFormat::kUuidV7: return "uuidv7";
    case KeyFormat::kUlid: return "ulid";
    case KeyFormat::kAny: break;
  }
  return "any";
}

Result<TimePoint> KeyTime(KeyFormat format, std::string_view key) {
  switch (format) {
    case KeyFormat::kUuidV7: return UuidV7Time(key);
    case KeyFormat::kUlid: return UlidTime(key);
    case KeyFormat::kAny: break;
  }
  return InvalidArgumentError("a key of any format carries no time");
}

}  // namespace idem
