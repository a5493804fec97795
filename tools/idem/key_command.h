// `idem key`: print fresh idempotency keys (UUIDv4, UUIDv7, ULID) or a UUIDv5 intent key.
#pragma once

#include <CLI/CLI.hpp>

namespace idem::cli {

// Adds the subcommand to `app`; returns a callback that runs it once parsed (exit code).
std::function<int()> AddKeyCommand(CLI::App& app);

}  // namespace idem::cli
