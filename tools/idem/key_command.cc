#include "key_command.h"

#include <iostream>

#include "idem/keys.h"
#include "subcommand.h"

namespace idem::cli {
namespace {

constexpr const char* kKeyDescription =
    "Print idempotency keys, one per line. Generate one key per logical operation and send\n"
    "it with every retry of that operation.\n"
    "  uuidv7 (default), ulid: time-ordered; a gateway route with key_format set refuses\n"
    "          them once older than its retention\n"
    "  uuidv4: random, reveals nothing\n"
    "  uuidv5: derived from --namespace and a versioned --intent, so every producer of the\n"
    "          same action computes the same key; bump the version (v1: -> v2:) when what\n"
    "          counts as \"the same action\" changes\n\n"
    "Examples:\n"
    "  idem key\n"
    "  idem key --type ulid --count 3\n"
    "  idem key --namespace 5b0c6a8e-3f7e-4c1e-9d2a-8f1e2c3d4b5a --intent v2:order:123:charge";

struct KeyFlags {
  std::string type;
  std::string ns = "url";
  std::string intent;
  int count = 1;
};

void AddKeyFlags(CLI::App& cmd, KeyFlags& flags) {
  cmd.add_option("--type", flags.type, "uuidv7 | ulid | uuidv4 | uuidv5 (default: uuidv7, or\n"
                                        "uuidv5 when --intent is given)")
      ->check(CLI::IsMember({"uuidv4", "uuidv7", "ulid", "uuidv5"}));
  cmd.add_option("--namespace", flags.ns,
                 "uuidv5 namespace: dns | url | oid | x500 | a UUID (best: one UUID of your own\n"
                 "per application, made once with `idem key --type uuidv4`)")
      ->capture_default_str();
  cmd.add_option("--intent", flags.intent,
                 "uuidv5 name: a version tag, then what the action is (v2:order:123:charge)");
  cmd.add_option("--count", flags.count, "How many keys (not for uuidv5: it is deterministic)")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
}

// --type uuidv5: the one key --namespace and --intent give.
int PrintIntentKey(const KeyFlags& flags) {
  if (flags.intent.empty()) {
    std::cerr << "idem key: --type uuidv5 needs --intent (for example v1:order:123:charge)\n";
    return 2;
  }
  if (flags.count != 1) {
    std::cerr << "idem key: a uuidv5 key is the same every time; --count makes no sense\n";
    return 2;
  }
  auto ns = ParseNamespace(flags.ns);
  if (!ns.ok()) {
    std::cerr << "idem key: " << ns.status().message() << "\n";
    return 2;
  }
  auto key = IntentKey(*ns, flags.intent);
  if (!key.ok()) {
    std::cerr << "idem key: " << key.status().message() << "\n";
    return 2;
  }
  std::cout << key->ToString() << "\n";
  return 0;
}

// --count fresh keys of `type` (uuidv7, uuidv4 or ulid).
int PrintFreshKeys(const std::string& type, int count) {
  for (int i = 0; i < count; ++i) {
    Result<std::string> key = InternalError("unreachable");
    if (type == "ulid") {
      key = NewUlid();
    } else {
      auto u = type == "uuidv4" ? NewUuidV4() : NewUuidV7();
      key = u.ok() ? Result<std::string>(u->ToString()) : Result<std::string>(u.status());
    }
    if (!key.ok()) {
      std::cerr << "idem key: " << key.status().ToString() << "\n";
      return 1;
    }
    std::cout << *key << "\n";
  }
  return 0;
}

int RunKeyCommand(const KeyFlags& flags) {
  std::string type = flags.type;
  if (type.empty()) type = flags.intent.empty() ? "uuidv7" : "uuidv5";
  if (type == "uuidv5") return PrintIntentKey(flags);
  if (!flags.intent.empty()) {
    std::cerr << "idem key: --intent only applies to --type uuidv5\n";
    return 2;
  }
  return PrintFreshKeys(type, flags.count);
}

}  // namespace

std::function<int()> AddKeyCommand(CLI::App& app) {
  return AddSubcommand<KeyFlags>(app, "key", kKeyDescription, AddKeyFlags, RunKeyCommand);
}

}  // namespace idem::cli
