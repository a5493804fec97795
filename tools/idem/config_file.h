// The daemons' configuration files (`--config FILE`): one TOML table named after the
// subcommand, one key per flag: the flag's name without its dashes, '-' written '_'.
//
//   [relay]
//   store = "postgresql://idem@127.0.0.1:5432/idem"
//   stream = "ORDERS"
//   duplicate_window = "10m"
//
// A flag given on the command line wins over the file. Strings, integers, booleans and arrays
// (for flags that take several values) are accepted; each value goes through the flag's own
// parsing and checks, as if it had been typed. A key no flag has, a flag that is command-line
// only (--help, --config, --check-config, and the test-only flags), another table, or a value
// the flag refuses, is an error naming the file, the line and the key: exit code 2.
//
// `idem gateway` reads a richer file (docs/gateway.md: settings without flags, [[route]]
// policies) with LoadGatewayConfig; it shares the conventions (section, key names, errors with
// line numbers), not this code.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "idem/status.h"

namespace idem::cli {

// Adds `--config FILE` to `cmd`. When given, the keys of the table [`section`] set the options
// of `cmd` the command line left unset, before CLI11 checks required options, so a required
// flag may come from the file. Errors are thrown as CLI::ParseError (exit code 2), the message
// "FILE:LINE: SECTION.KEY: what is wrong".
// REQUIRES: called after every other option of `cmd` is added.
CLI::Option* AddConfigFileOption(CLI::App& cmd, const std::string& section);

// Adds `--check-config`: the daemon loads and checks its flags and file, says so, and exits 0
// (2 when something is wrong) without opening a store, connecting or listening.
CLI::Option* AddCheckConfigFlag(CLI::App& cmd, bool& check);

// Marks `option` as command-line only (not a key of the config file): the test-only flags.
void CommandLineOnly(CLI::Option* option);

// The text of a secret kept in a file (a password, a token): the file's whole content without
// its trailing line ends. A missing, unreadable or empty file is kInvalidArgument naming
// `setting` and the path (never the content).
Result<std::string> ReadSecretFile(const std::string& setting, const std::string& path);

}  // namespace idem::cli
