// `idem gateway`: flags and config file -> GatewayOptions -> RunGateway.
#pragma once

#include <CLI/CLI.hpp>

namespace idem::cli {

// Adds the subcommand to `app`; returns a callback that runs it once parsed (exit code).
std::function<int()> AddGatewayCommand(CLI::App& app);

}  // namespace idem::cli
