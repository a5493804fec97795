// How an `idem` subcommand is put together: its flags live in a struct of its own, one
// function declares them on the subcommand, another runs the subcommand from them.
//
//   std::function<int()> AddRelayCommand(CLI::App& app) {
//     return AddSubcommand<RelayFlags>(app, "relay", kRelayDescription, AddRelayFlags,
//                                      RunRelayCommand);
//   }
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>

namespace idem::cli {

// Adds the subcommand `name` to `app` with `description` (its --help), calls
// `add_flags(CLI::App& subcommand, Flags& flags)` to declare its options on a Flags of its own,
// and returns what main calls once the command line is parsed: `run(Flags& flags)`, whose
// result is the exit code. The Flags outlive the parse (the returned function holds them).
template <typename Flags, typename AddFlags, typename Run>
std::function<int()> AddSubcommand(CLI::App& app, const std::string& name,
                                   const std::string& description, AddFlags add_flags, Run run) {
  auto flags = std::make_shared<Flags>();
  add_flags(*app.add_subcommand(name, description), *flags);
  return [flags, run]() -> int { return run(*flags); };
}

}  // namespace idem::cli
