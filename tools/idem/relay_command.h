// `idem relay`: publish the transactional outbox to NATS JetStream (docs/emit.md).
#pragma once

#include <CLI/CLI.hpp>

namespace idem::cli {

// Adds the subcommand to `app`; returns a callback that runs it once parsed (exit code).
std::function<int()> AddRelayCommand(CLI::App& app);

}  // namespace idem::cli
