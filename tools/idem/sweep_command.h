// `idem sweep`: keep the inbox and the outbox within their retention without cron
// (docs/worker.md, "Keeping the inbox bounded").
#pragma once

#include <CLI/CLI.hpp>

namespace idem::cli {

// Adds the subcommand to `app`; returns a callback that runs it once parsed (exit code).
std::function<int()> AddSweepCommand(CLI::App& app);

}  // namespace idem::cli
