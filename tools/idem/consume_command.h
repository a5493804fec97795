// `idem consume`: a JetStream-to-HTTP sidecar that turns broker redelivery into safe HTTP calls.
#pragma once

#include <CLI/CLI.hpp>

namespace idem::cli {

// Adds the subcommand to `app`; returns a callback that runs it once parsed (exit code).
std::function<int()> AddConsumeCommand(CLI::App& app);

}  // namespace idem::cli
