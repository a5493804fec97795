#include "daemon_flags.h"

#include <iostream>

#include "config_file.h"
#include "daemon_log.h"
#include "idem/gateway_options.h"
#include "pg/pg_url.h"
#include "store_url.h"

namespace idem::cli {

void AddPostgresStoreFlags(CLI::App& cmd, PostgresStoreFlags& flags,
                           const std::string& description) {
  cmd.add_option("--store", flags.url, description)->required();
  cmd.add_option("--store-password-file", flags.password_file,
                 "File holding the database password (instead of one in the URL or libpq's\n"
                 "PGPASSWORD, PGPASSFILE, ~/.pgpass)");
}

Result<std::string> PostgresStoreUrl(const PostgresStoreFlags& flags) {
  auto store = StoreUrlWithPasswordFile(flags.url, "--store-password-file", flags.password_file);
  if (!store.ok()) return store.status();
  if (auto parsed = internal::pg::ParsePostgresUrl(*store); !parsed.ok()) {
    return InvalidArgumentError("--store: " + parsed.status().message());
  }
  return store;
}

void AddNatsFlags(CLI::App& cmd, std::string& url, NatsSecretFlags& flags) {
  cmd.add_option("--nats", url,
                 "The NATS server (nats://HOST:PORT), or every node of a cluster,\n"
                 "comma-separated")
      ->capture_default_str();
  cmd.add_option("--nats-token-file", flags.token_file,
                 "File holding the NATS authentication token");
  cmd.add_option("--nats-credentials-file", flags.credentials_file,
                 "NATS credentials file (a user JWT and its NKey seed, as nsc writes it)");
}

Result<internal::NatsAuth> NatsAuthFromFlags(const NatsSecretFlags& flags) {
  internal::NatsAuth auth;
  if (!flags.token_file.empty()) {
    auto token = ReadSecretFile("--nats-token-file", flags.token_file);
    if (!token.ok()) return token.status();
    auth.token = *token;
  }
  if (!flags.credentials_file.empty()) {
    if (auto readable = ReadSecretFile("--nats-credentials-file", flags.credentials_file);
        !readable.ok()) {
      return readable.status();
    }
    auth.credentials_file = flags.credentials_file;
  }
  return auth;
}

Status ParseDurationFlags(std::initializer_list<DurationFlag> flags, bool must_be_positive) {
  for (const DurationFlag& flag : flags) {
    auto parsed = ParseDuration(*flag.text);
    if (!parsed.ok()) {
      return InvalidArgumentError(std::string(flag.name) + ": " + parsed.status().message());
    }
    *flag.out = std::chrono::duration_cast<std::chrono::milliseconds>(*parsed);
    if (must_be_positive && flag.out->count() <= 0) {
      return InvalidArgumentError(std::string(flag.name) + " must be positive");
    }
  }
  return Status::Ok();
}

void AddLogAndConfigFlags(CLI::App& cmd, DaemonOutputFlags& flags, const std::string& section) {
  AddLogFormatOption(cmd, flags.log_format);
  AddCheckConfigFlag(cmd, flags.check_config);
  AddConfigFileOption(cmd, section);
}

int RefuseConfiguration(std::string_view subcommand, std::string_view message) {
  std::cerr << "idem " << subcommand << ": " << message << "\n";
  return 2;
}

int ConfigurationOk(std::string_view subcommand) {
  std::cout << "idem " << subcommand << ": configuration OK\n";
  return 0;
}

}  // namespace idem::cli
