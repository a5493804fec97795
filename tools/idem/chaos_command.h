// `idem chaos`: measure exactly-once effects end to end under injected faults (docs/chaos.md).
#pragma once

#include <CLI/CLI.hpp>

namespace idem::cli {

// Adds the subcommand to `app`; returns a callback that runs it once parsed (exit code).
std::function<int()> AddChaosCommand(CLI::App& app);

}  // namespace idem::cli
