#include "command_line.h"

#include <iterator>

namespace idem::cli {
namespace {

struct Renamed {
  const char* subcommand;
  const char* old_flag;
  const char* new_flag;
};

constexpr Renamed kRenamed[] = {
    {"relay", "--db", "--store"},
    {"sweep", "--db", "--store"},
    {"relay", "--retention-days", "--outbox-retention-days"},
};

}  // namespace

std::string OneLineSubcommands::make_subcommand(const CLI::App* sub) const {
  auto found = summaries_.find(sub->get_name());
  std::string summary = found != summaries_.end() ? found->second : sub->get_description();
  summary = summary.substr(0, summary.find('\n'));
  std::ostringstream out;
  CLI::detail::format_help(out, sub->get_display_name(), summary, get_column_width());
  return out.str();
}

std::string UnknownSubcommand(CLI::App& app, const std::vector<std::string>& args) {
  if (args.empty() || args.front().empty() || args.front().front() == '-') return "";
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == args.front()) return "";
  }
  return args.front();
}

void RewriteDeprecatedFlags(std::vector<std::string>& args, std::ostream& warnings) {
  if (args.empty()) return;
  const std::string& subcommand = args.front();
  for (auto it = std::next(args.begin()); it != args.end(); ++it) {
    if (*it == "--") break;
    for (const Renamed& r : kRenamed) {
      if (subcommand != r.subcommand) continue;
      const std::string old_flag = r.old_flag;
      if (*it == old_flag || it->rfind(old_flag + "=", 0) == 0) {
        warnings << "idem " << subcommand << ": " << old_flag << " is deprecated; use "
                 << r.new_flag << " (the old spelling will go in a future release)\n";
        *it = r.new_flag + it->substr(old_flag.size());
      }
    }
  }
}

}  // namespace idem::cli
