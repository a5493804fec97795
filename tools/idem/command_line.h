// What `idem` does with its command line before CLI11 parses it: the one-line-per-subcommand
// top-level help, the unknown subcommand, and the deprecated spellings of renamed flags.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace idem::cli {

// Lists each subcommand of the app on one line, with its summary from `summaries` (the
// subcommand's own --help keeps its full description).
class OneLineSubcommands : public CLI::Formatter {
 public:
  explicit OneLineSubcommands(std::map<std::string, std::string> summaries)
      : summaries_(std::move(summaries)) {}
  std::string make_subcommand(const CLI::App* sub) const override;

 private:
  std::map<std::string, std::string> summaries_;
};

// The name of the subcommand `args` (argv without the program name) asks for, when it is not
// one of `app`'s: "" when the first argument is an option or a known subcommand.
std::string UnknownSubcommand(CLI::App& app, const std::vector<std::string>& args);

// Renamed flags keep working under their old spelling, with a warning on `warnings`:
//   idem relay --db URL             ->  --store URL
//   idem sweep --db URL             ->  --store URL
//   idem relay --retention-days N   ->  --outbox-retention-days N
// `args` is argv without the program name; the old spelling is replaced in place (also in
// the --old=VALUE form). Hidden from --help.
void RewriteDeprecatedFlags(std::vector<std::string>& args, std::ostream& warnings);

}  // namespace idem::cli
