// The daemons' config files (--config, --check-config), run through the built binary: the
// examples in deploy/config/ parse and name every flag, the command line wins over the file,
// unknown keys and unreadable secret files are exit code 2 with the line or the path.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "cli/run_idem.h"
#include "servers/nats_server.h"

namespace idem {
namespace {

using testing::RunIdem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Example(const std::string& daemon) {
  return std::string(build_tree::kSourceDir) + "/deploy/config/" + daemon + ".toml";
}

// The long flags `idem DAEMON --help` lists that a config file may set: all but --help,
// --config, --check-config and the "Testing" group's.
std::set<std::string> ConfigurableFlags(const std::string& help) {
  std::set<std::string> flags;
  std::istringstream lines(help);
  std::string line, group;
  const std::regex option(R"(^\s+(?:-\w,)?--([a-z][a-z0-9-]*))");
  while (std::getline(lines, line)) {
    if (!line.empty() && line.front() != ' ' && line.back() == ':') group = line;
    std::smatch m;
    if (!std::regex_search(line, m, option) || group == "Testing:") continue;
    const std::string name = m[1];
    if (name == "help" || name == "config" || name == "check-config") continue;
    flags.insert(name);
  }
  return flags;
}

class ConfigFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.File(name);
    std::ofstream(path) << text;
    return path;
  }
  testing::TempDir dir_;
};

TEST_F(ConfigFileTest, EveryExampleParsesAndHasAKeyForEveryFlag) {
  for (const std::string daemon : {"gateway", "relay", "consume", "sweep"}) {
    SCOPED_TRACE(daemon);
    const std::string path = Example(daemon);
    auto checked = RunIdem(dir_, {daemon, "--config", path, "--check-config"});
    EXPECT_EQ(checked.exit_code, 0) << checked.output;
    EXPECT_NE(checked.output.find("configuration OK"), std::string::npos) << checked.output;

    auto help = RunIdem(dir_, {daemon, "--help"});
    ASSERT_EQ(help.exit_code, 0) << help.output;
    const std::set<std::string> flags = ConfigurableFlags(help.output);
    EXPECT_GE(flags.size(), 5u) << help.output;
    const std::string example = ReadFile(path);
    for (const std::string& flag : flags) {
      std::string key = flag;
      for (char& c : key) c = c == '-' ? '_' : c;
      const std::regex line("(^|\n)#? ?" + key + " = ");
      EXPECT_TRUE(std::regex_search(example, line))
          << path << " has no line for --" << flag << " (key " << key << ")";
    }
  }
}

TEST_F(ConfigFileTest, TheFileSetsWhatTheCommandLineLeavesAndTheCommandLineWins) {
  // The file's batch is refused, so it was read; given on the command line, it is not used.
  const std::string path = Write("relay.toml",
                                 "[relay]\n"
                                 "store = \"postgresql://idem@127.0.0.1:5432/idem\"\n"
                                 "stream = \"ORDERS\"\n"
                                 "batch = 0\n");
  auto from_file = RunIdem(dir_, {"relay", "--config", path, "--check-config"});
  EXPECT_EQ(from_file.exit_code, 2) << from_file.output;
  EXPECT_NE(from_file.output.find("--batch must be 1 to 10000"), std::string::npos)
      << from_file.output;

  auto overridden = RunIdem(dir_, {"relay", "--config", path, "--batch", "64", "--check-config"});
  EXPECT_EQ(overridden.exit_code, 0) << overridden.output;

  // And the other way round: a good file, a bad flag.
  const std::string good = Write("good.toml",
                                 "[relay]\n"
                                 "store = \"postgresql://idem@127.0.0.1:5432/idem\"\n"
                                 "stream = \"ORDERS\"\n"
                                 "batch = 64\n");
  auto bad_flag = RunIdem(dir_, {"relay", "--batch", "0", "--config", good, "--check-config"});
  EXPECT_EQ(bad_flag.exit_code, 2) << bad_flag.output;

  // A required flag (--store) may come from the file alone.
  auto required = RunIdem(dir_, {"relay", "--config", good, "--check-config"});
  EXPECT_EQ(required.exit_code, 0) << required.output;
  auto missing = RunIdem(dir_, {"relay", "--stream", "ORDERS", "--check-config"});
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("--store is required"), std::string::npos) << missing.output;
}

TEST_F(ConfigFileTest, FlagsOfEachKindAreReadFromTheFile) {
  // A boolean flag (once), an integer, a duration and a checked choice (log_format).
  const std::string sweep = Write("sweep.toml",
                                  "[sweep]\n"
                                  "store = \"postgresql://idem@127.0.0.1:5432/idem\"\n"
                                  "once = true\n"
                                  "admin_listen = \"127.0.0.1:0\"\n");
  auto once = RunIdem(dir_, {"sweep", "--config", sweep, "--check-config"});
  EXPECT_EQ(once.exit_code, 2) << once.output;  // --once and --admin-listen do not go together
  EXPECT_NE(once.output.find("--once exits after one sweep"), std::string::npos) << once.output;

  const std::string consume = Write("consume.toml",
                                    "[consume]\n"
                                    "stream = \"ORDERS\"\n"
                                    "consumer = \"ledger\"\n"
                                    "deliver = \"http://127.0.0.1:9000/apply\"\n"
                                    "ack_wait = \"500ms\"\n");
  auto ack_wait = RunIdem(dir_, {"consume", "--config", consume, "--check-config"});
  EXPECT_EQ(ack_wait.exit_code, 2) << ack_wait.output;
  EXPECT_NE(ack_wait.output.find("--ack-wait (500 ms) must be at least 1 s"), std::string::npos)
      << ack_wait.output;

  const std::string format = Write("format.toml", "[consume]\nlog_format = \"xml\"\n");
  auto bad_format = RunIdem(dir_, {"consume", "--config", format, "--stream", "S", "--consumer",
                                   "c", "--deliver", "http://127.0.0.1:9/x", "--check-config"});
  EXPECT_EQ(bad_format.exit_code, 2) << bad_format.output;
  EXPECT_NE(bad_format.output.find(format + ":2: consume.log_format:"), std::string::npos)
      << bad_format.output;

  auto bad_deliver = RunIdem(dir_, {"consume", "--stream", "S", "--consumer", "c", "--deliver",
                                    "https://127.0.0.1:9/x", "--check-config"});
  EXPECT_EQ(bad_deliver.exit_code, 2) << bad_deliver.output;
  EXPECT_NE(bad_deliver.output.find("must be http://HOST:PORT/PATH"), std::string::npos)
      << bad_deliver.output;
}

TEST_F(ConfigFileTest, AnUnknownKeyIsAnErrorNamingItsLine) {
  const std::string relay = Write("relay.toml",
                                  "[relay]\n"
                                  "store = \"postgresql://idem@127.0.0.1:5432/idem\"\n"
                                  "\n"
                                  "stream = \"ORDERS\"\n"
                                  "batchsize = 10\n");
  auto run = RunIdem(dir_, {"relay", "--config", relay, "--check-config"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find(relay + ":5: relay.batchsize: is not a setting of idem relay"),
            std::string::npos)
      << run.output;

  // A command-line-only flag, another table, a key spelled with '-'.
  const std::string testing_only =
      Write("t.toml", "[sweep]\nstore = \"postgresql://u@h/d\"\nunsafe_clock_offset = \"1d\"\n");
  auto only = RunIdem(dir_, {"sweep", "--config", testing_only, "--check-config"});
  EXPECT_EQ(only.exit_code, 2) << only.output;
  EXPECT_NE(only.output.find(":3: sweep.unsafe_clock_offset:"), std::string::npos) << only.output;
  const std::string other = Write("o.toml", "[consume]\nstream = \"S\"\n\n[relay]\nbatch = 1\n");
  auto table = RunIdem(dir_, {"consume", "--config", other, "--check-config"});
  EXPECT_EQ(table.exit_code, 2) << table.output;
  EXPECT_NE(table.output.find(other + ":4: relay: idem consume reads only the table [consume]"),
            std::string::npos)
      << table.output;

  // The gateway's own file names the line too.
  const std::string gateway = Write("gateway.toml",
                                    "[gateway]\n"
                                    "upstream = \"http://127.0.0.1:9000\"\n"
                                    "listne = \"127.0.0.1:8080\"\n");
  auto gw = RunIdem(dir_, {"gateway", "--config", gateway, "--check-config"});
  EXPECT_EQ(gw.exit_code, 2) << gw.output;
  EXPECT_NE(gw.output.find(gateway + ":3: gateway.listne: is not a gateway setting"),
            std::string::npos)
      << gw.output;

  // A TOML syntax error: the line and column.
  const std::string broken = Write("broken.toml", "[relay]\nstore = \"postgresql://u@h/d\n");
  auto syntax = RunIdem(dir_, {"relay", "--config", broken, "--check-config"});
  EXPECT_EQ(syntax.exit_code, 2) << syntax.output;
  EXPECT_NE(syntax.output.find(broken + ":2:"), std::string::npos) << syntax.output;

  auto absent = RunIdem(dir_, {"relay", "--config", dir_.File("absent.toml"), "--check-config"});
  EXPECT_EQ(absent.exit_code, 2) << absent.output;
  EXPECT_NE(absent.output.find("absent.toml"), std::string::npos) << absent.output;
}

TEST_F(ConfigFileTest, SecretFilesAreReadAndAMissingOneIsExitCode2) {
  const std::string password = Write("password", "s3cret/with:odd@chars\n");
  auto ok = RunIdem(dir_, {"relay", "--store", "postgresql://idem@127.0.0.1:5432/idem",
                           "--store-password-file", password, "--stream", "S", "--check-config"});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(ok.output.find("s3cret"), std::string::npos) << ok.output;

  auto twice = RunIdem(dir_, {"sweep", "--store", "postgresql://idem:other@127.0.0.1:5432/idem",
                              "--store-password-file", password, "--check-config"});
  EXPECT_EQ(twice.exit_code, 2) << twice.output;
  EXPECT_NE(twice.output.find("already holds a password"), std::string::npos) << twice.output;

  const std::string missing = dir_.File("no-such-token");
  auto token = RunIdem(dir_, {"consume", "--stream", "S", "--consumer", "c", "--deliver",
                              "http://127.0.0.1:9/x", "--nats-token-file", missing,
                              "--check-config"});
  EXPECT_EQ(token.exit_code, 2) << token.output;
  EXPECT_NE(token.output.find("--nats-token-file: cannot read " + missing), std::string::npos)
      << token.output;

  const std::string gateway = Write("gateway.toml",
                                    "[gateway]\n"
                                    "upstream = \"http://127.0.0.1:9000\"\n"
                                    "store = \"redis://127.0.0.1:6379\"\n"
                                    "store_password_file = \"" + missing + "\"\n");
  auto redis = RunIdem(dir_, {"gateway", "--config", gateway, "--check-config"});
  EXPECT_EQ(redis.exit_code, 2) << redis.output;
  EXPECT_NE(redis.output.find("store_password_file: cannot read " + missing), std::string::npos)
      << redis.output;

  const std::string empty = Write("empty", "");
  auto relay = RunIdem(dir_, {"relay", "--store", "postgresql://idem@h/d", "--stream", "S",
                              "--nats-token-file", empty, "--check-config"});
  EXPECT_EQ(relay.exit_code, 2) << relay.output;
  EXPECT_NE(relay.output.find("is empty"), std::string::npos) << relay.output;
}

// The token read from --nats-token-file is what a server that requires one sees: with the right
// token the consumer gets as far as looking up its (missing) stream; with a wrong one it stops
// at start with exit 2 and says why, rather than waiting forever for a connection nats.c has
// given up on.
TEST_F(ConfigFileTest, ANatsTokenFileAuthenticatesAndAWrongTokenEndsTheConsumerAtStart) {
  servers::NatsServer nats(servers::NatsServer::Options{.auth_token = "t0ken-from-a-file"});
  ASSERT_EQ(nats.Start(), "");
  const std::string good = Write("good-token", "t0ken-from-a-file\n");
  const std::string wrong = Write("wrong-token", "another-token\n");
  auto consume = [&](const std::string& token_file) {
    return RunIdem(dir_, {"consume", "--nats", nats.Url(), "--stream", "NO_SUCH_STREAM",
                          "--consumer", "c", "--deliver", "http://127.0.0.1:9/x",
                          "--nats-token-file", token_file, "--admin-listen", "127.0.0.1:0"});
  };
  auto accepted = consume(good);
  EXPECT_EQ(accepted.exit_code, 2) << accepted.output;
  EXPECT_NE(accepted.output.find("'NO_SUCH_STREAM' does not exist"), std::string::npos)
      << accepted.output;

  auto refused = consume(wrong);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("the connection cannot be made"), std::string::npos)
      << refused.output;
  EXPECT_EQ(refused.output.find("another-token"), std::string::npos) << refused.output;
}

}  // namespace
}  // namespace idem
