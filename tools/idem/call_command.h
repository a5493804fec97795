// `idem call`: one HTTP request made safe to retry, with one Idempotency-Key for every attempt.
#pragma once

#include <CLI/CLI.hpp>

namespace idem::cli {

// Adds the subcommand to `app`; returns a callback that runs it once parsed (exit code).
std::function<int()> AddCallCommand(CLI::App& app);

}  // namespace idem::cli
