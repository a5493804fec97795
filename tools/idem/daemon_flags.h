// The flags the daemons (idem relay, sweep, consume) share, declared once with the same names,
// help and checks: the PostgreSQL store and its password file, the NATS server and its
// credentials, and the log format, --check-config and --config that every daemon ends with.
// Also what a daemon (the gateway too) prints for a configuration it refuses or accepts.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <initializer_list>
#include <string>
#include <string_view>

#include "idem/status.h"
#include "nats/nats_auth.h"

namespace idem::cli {

// --store (a postgresql:// URL) and --store-password-file.
struct PostgresStoreFlags {
  std::string url, password_file;
};

// Adds --store (required; `description` is its help) and --store-password-file to `cmd`.
void AddPostgresStoreFlags(CLI::App& cmd, PostgresStoreFlags& flags,
                           const std::string& description);

// The store URL with the password file's password in it, checked as a PostgreSQL URL.
// kInvalidArgument naming the flag when the file cannot be read or the URL is not one.
Result<std::string> PostgresStoreUrl(const PostgresStoreFlags& flags);

// The files --nats-token-file and --nats-credentials-file name (the secrets stay in files).
struct NatsSecretFlags {
  std::string token_file, credentials_file;
};

// Adds --nats (bound to `url`, its default shown in the help), --nats-token-file and
// --nats-credentials-file to `cmd`.
void AddNatsFlags(CLI::App& cmd, std::string& url, NatsSecretFlags& flags);

// The authentication the files give: the token read from its file, the credentials file's
// path once it is known to be readable. kInvalidArgument naming the flag otherwise.
Result<internal::NatsAuth> NatsAuthFromFlags(const NatsSecretFlags& flags);

// A flag that takes a duration (250ms, 30s, 10m, 1h, 7d), and where its value goes.
struct DurationFlag {
  const char* name;
  const std::string* text;
  std::chrono::milliseconds* out;
};

// Parses each flag's text into its `out`, in order. kInvalidArgument for the first that is not
// a duration ("NAME: what is wrong") or, with `must_be_positive`, is zero ("NAME must be
// positive").
Status ParseDurationFlags(std::initializer_list<DurationFlag> flags, bool must_be_positive);

// --log-format and --check-config.
struct DaemonOutputFlags {
  std::string log_format = "text";
  bool check_config = false;
};

// Adds --log-format, --check-config and --config (the TOML table [`section`]) to `cmd`.
// REQUIRES: called after every other option of `cmd` is added (see AddConfigFileOption).
void AddLogAndConfigFlags(CLI::App& cmd, DaemonOutputFlags& flags, const std::string& section);

// Prints "idem SUBCOMMAND: MESSAGE" on standard error; returns 2, the exit code of a
// configuration the daemon refuses.
int RefuseConfiguration(std::string_view subcommand, std::string_view message);

// Prints "idem SUBCOMMAND: configuration OK" on standard output; returns 0 (--check-config).
int ConfigurationOk(std::string_view subcommand);

// The steps of a daemon's command: its configuration from `flags` (`configure(flags)`, a
// Result); refused (RefuseConfiguration, 2) when that fails; ConfigurationOk (0) with
// --check-config (`flags.output`); else the exit code of `run(configuration, flags)`.
template <typename Flags, typename Configure, typename Run>
int RunDaemonCommand(std::string_view subcommand, const Flags& flags, Configure configure,
                     Run run) {
  auto configuration = configure(flags);
  if (!configuration.ok()) {
    return RefuseConfiguration(subcommand, configuration.status().message());
  }
  if (flags.output.check_config) return ConfigurationOk(subcommand);
  return run(*configuration, flags);
}

}  // namespace idem::cli
