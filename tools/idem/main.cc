// idem: the command-line entry point. Each subcommand lives in its own file; this one only
// parses arguments and dispatches.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "call_command.h"
#include "chaos_command.h"
#include "command_line.h"
#include "consume_command.h"
#include "gateway_command.h"
#include "idem/version.h"
#include "key_command.h"
#include "migrate_command.h"
#include "relay_command.h"
#include "selfcheck.h"
#include "sweep_command.h"

int main(int argc, char** argv) {
  CLI::App app{
      "idem: exactly-once effects on top of at-least-once delivery. `idem SUBCOMMAND --help`\n"
      "describes each subcommand; the daemons (gateway, relay, consume, sweep) also read their\n"
      "flags from a TOML file (--config FILE).",
      "idem"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(idem::kVersion));

  auto* version = app.add_subcommand("version", "Print the idem version and exit");

  auto run_selfcheck = idem::cli::AddSelfCheckCommand(app);
  auto run_migrate = idem::cli::AddMigrateCommand(app);
  auto run_gateway = idem::cli::AddGatewayCommand(app);
  auto run_key = idem::cli::AddKeyCommand(app);
  auto run_call = idem::cli::AddCallCommand(app);
  auto run_consume = idem::cli::AddConsumeCommand(app);
  auto run_relay = idem::cli::AddRelayCommand(app);
  auto run_chaos = idem::cli::AddChaosCommand(app);
  auto run_sweep = idem::cli::AddSweepCommand(app);

  app.formatter(std::make_shared<idem::cli::OneLineSubcommands>(std::map<std::string, std::string>{
      {"version", "Print the idem version"},
      {"selfcheck", "Drive a store through every record transition and report each step"},
      {"migrate", "Create or upgrade a store's schema (or print its SQL)"},
      {"gateway", "Run the idempotency gateway: an HTTP reverse proxy with Idempotency-Key"},
      {"key", "Print idempotency keys (UUIDv7, ULID, UUIDv4, UUIDv5 from an intent)"},
      {"call", "Send one HTTP request with one key, retried safely"},
      {"consume", "Deliver a JetStream stream to an HTTP service, one key per message"},
      {"relay", "Publish the transactional outbox to a JetStream stream"},
      {"chaos", "Run the whole pipeline under injected faults and judge exactly-once"},
      {"sweep", "Keep the inbox and the outbox within their retention"},
  }));

  std::vector<std::string> args(argv + 1, argv + argc);
  if (std::string unknown = idem::cli::UnknownSubcommand(app, args); !unknown.empty()) {
    std::cerr << "idem: unknown subcommand '" << unknown << "' (idem --help lists them)\n";
    return 2;
  }
  idem::cli::RewriteDeprecatedFlags(args, std::cerr);
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first

  // A bad flag is exit code 2 for every subcommand (the docs promise it), with CLI11's message
  // on standard error; --help and --version are not errors.
  try {
    app.parse(args);
  } catch (const CLI::RequiredError& e) {
    // CLI11 checks for missing flags before unknown ones; a misspelt flag is the likelier
    // mistake (`--stor=...`), and its name is what the user needs to see.
    for (const CLI::App* sub : app.get_subcommands()) {
      if (std::vector<std::string> extra = sub->remaining(); !extra.empty()) {
        app.exit(CLI::ExtrasError(sub->get_name(), extra));
        return 2;
      }
    }
    app.exit(e);
    return 2;
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  if (version->parsed()) {
    std::cout << "idem " << idem::kVersion << "\n";
    return 0;
  }
  if (app.got_subcommand("selfcheck")) return run_selfcheck();
  if (app.got_subcommand("migrate")) return run_migrate();
  if (app.got_subcommand("gateway")) return run_gateway();
  if (app.got_subcommand("key")) return run_key();
  if (app.got_subcommand("call")) return run_call();
  if (app.got_subcommand("consume")) return run_consume();
  if (app.got_subcommand("relay")) return run_relay();
  if (app.got_subcommand("chaos")) return run_chaos();
  if (app.got_subcommand("sweep")) return run_sweep();
  return 0;
}
