// The top-level command line: one line per subcommand in `idem --help`, an unknown subcommand
// is exit code 2, renamed flags still work under their old spelling.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli/run_idem.h"

namespace idem {
namespace {

using testing::RunIdem;

const std::vector<std::string> kSubcommands = {"version", "selfcheck", "migrate", "gateway",
                                               "key",     "call",      "consume", "relay",
                                               "chaos",   "sweep"};

class CommandLineTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
};

TEST_F(CommandLineTest, TopLevelHelpListsEachSubcommandOnOneLine) {
  auto help = RunIdem(dir_, {"--help"});
  ASSERT_EQ(help.exit_code, 0) << help.output;
  const size_t start = help.output.find("Subcommands:\n");
  ASSERT_NE(start, std::string::npos) << help.output;
  std::istringstream lines(help.output.substr(start + 13));
  std::vector<std::string> listed;
  std::string line;
  while (std::getline(lines, line) && !line.empty()) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    listed.push_back(name);
  }
  EXPECT_EQ(listed, kSubcommands) << help.output;
  size_t line_count = 0;
  for (char c : help.output) line_count += c == '\n';
  EXPECT_LE(line_count, 25u) << help.output;

  // A subcommand's own help keeps its full description.
  auto relay = RunIdem(dir_, {"relay", "--help"});
  EXPECT_EQ(relay.exit_code, 0);
  EXPECT_NE(relay.output.find("Run as many relays as you like on one outbox"), std::string::npos)
      << relay.output;
}

TEST_F(CommandLineTest, AnUnknownSubcommandIsExitCode2AndNamed) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"relya"}, std::vector<std::string>{"relya", "--help"}}) {
    auto run = RunIdem(dir_, args);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find("unknown subcommand 'relya'"), std::string::npos) << run.output;
  }
  auto none = RunIdem(dir_, {});
  EXPECT_EQ(none.exit_code, 2) << none.output;
}

// A misspelt flag is named, even when a required flag is missing too (CLI11 reports the missing
// one first, and the user would chase the wrong mistake).
TEST_F(CommandLineTest, AnUnknownFlagIsNamedBeforeAMissingRequiredOne) {
  for (const std::string sub : {"relay", "consume", "sweep"}) {
    auto run = RunIdem(dir_, {sub, "--bogus=x"});
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find("not expected: --bogus=x"), std::string::npos)
        << sub << ": " << run.output;
    EXPECT_EQ(run.output.find("is required"), std::string::npos) << sub << ": " << run.output;
  }
  auto missing = RunIdem(dir_, {"relay"});
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("--store is required"), std::string::npos) << missing.output;
}

// An empty or malformed tenant header would turn tenancy off without a word: refused, named.
TEST_F(CommandLineTest, TheTenantHeaderMustBeAHeaderName) {
  for (const std::string bad : {"", "X Tenant", "X-Tenant:"}) {
    auto run = RunIdem(dir_, {"gateway", "--upstream", "http://127.0.0.1:9", "--tenant-header",
                              bad, "--check-config"});
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find("--tenant-header '" + bad + "' is not a header name"),
              std::string::npos)
        << run.output;
  }
  auto good = RunIdem(dir_, {"gateway", "--upstream", "http://127.0.0.1:9", "--tenant-header",
                             "X-Tenant", "--check-config"});
  EXPECT_EQ(good.exit_code, 0) << good.output;
}

TEST_F(CommandLineTest, RenamedFlagsKeepWorkingWithAWarning) {
  auto relay = RunIdem(dir_, {"relay", "--db", "postgresql://idem@127.0.0.1:5432/idem", "--stream",
                              "S", "--retention-days=7", "--check-config"});
  EXPECT_EQ(relay.exit_code, 0) << relay.output;
  EXPECT_NE(relay.output.find("--db is deprecated; use --store"), std::string::npos)
      << relay.output;
  EXPECT_NE(relay.output.find("--retention-days is deprecated; use --outbox-retention-days"),
            std::string::npos)
      << relay.output;

  auto sweep =
      RunIdem(dir_, {"sweep", "--db", "postgresql://idem@127.0.0.1:5432/idem", "--check-config"});
  EXPECT_EQ(sweep.exit_code, 0) << sweep.output;
  EXPECT_NE(sweep.output.find("--db is deprecated"), std::string::npos) << sweep.output;

  // Hidden: not in the help.
  auto help = RunIdem(dir_, {"relay", "--help"});
  EXPECT_EQ(help.output.find("--db "), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("--store"), std::string::npos) << help.output;
}

TEST_F(CommandLineTest, TheDaemonsShareTheirNamesAndDefaults) {
  for (const std::string daemon : {"gateway", "relay", "consume", "sweep"}) {
    auto help = RunIdem(dir_, {daemon, "--help"});
    EXPECT_NE(help.output.find("--log-format"), std::string::npos) << daemon;
    EXPECT_NE(help.output.find("--check-config"), std::string::npos) << daemon;
    EXPECT_NE(help.output.find("--config"), std::string::npos) << daemon;
  }
  for (const std::string daemon : {"relay", "consume"}) {
    auto help = RunIdem(dir_, {daemon, "--help"});
    EXPECT_NE(help.output.find("=nats://127.0.0.1:4222"), std::string::npos) << daemon << ":\n"
                                                                             << help.output;
  }
  auto relay = RunIdem(dir_, {"relay", "--help"});
  EXPECT_NE(relay.output.find("--duplicate-window TEXT=10m"), std::string::npos) << relay.output;
  auto consume = RunIdem(dir_, {"consume", "--help"});
  EXPECT_NE(consume.output.find("--ack-wait TEXT=30s"), std::string::npos) << consume.output;
}

}  // namespace
}  // namespace idem
