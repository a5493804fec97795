#include "config_file.h"

#define TOML_HEADER_ONLY 0
#include <toml++/toml.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace idem::cli {
namespace {

constexpr const char* kCommandLineOnlyGroup = "Testing";

[[noreturn]] void Fail(const std::string& message) {
  throw CLI::ConfigError(message, CLI::ExitCodes::ConfigError);
}

std::string Where(const std::string& path, const toml::source_region& source) {
  return path + ":" + std::to_string(source.begin.line);
}

// One TOML value as the text a user would have typed after the flag.
bool ScalarText(const toml::node& node, std::string& out) {
  if (auto s = node.value_exact<std::string>()) {
    out = *s;
  } else if (auto i = node.value_exact<int64_t>()) {
    out = std::to_string(*i);
  } else if (auto b = node.value_exact<bool>()) {
    out = *b ? "true" : "false";
  } else if (auto d = node.value_exact<double>()) {
    std::ostringstream text;
    text << *d;
    out = text.str();
  } else {
    return false;
  }
  return true;
}

bool IsKeyOf(const CLI::Option* option) {
  return option != nullptr && option->get_configurable() &&
         option->get_group() != kCommandLineOnlyGroup && !option->get_lnames().empty();
}

void ApplyKey(CLI::App& cmd, const std::string& path, const std::string& section,
              const toml::key& key, const toml::node& node) {
  const std::string name(key.str());
  const std::string where = Where(path, key.source()) + ": " + section + "." + name;
  const bool dashed = name.find('-') != std::string::npos;
  std::string flag = "--" + name;
  for (char& c : flag) c = c == '_' ? '-' : c;
  CLI::Option* option = dashed ? nullptr : cmd.get_option_no_throw(flag);
  if (option == cmd.get_help_ptr()) option = nullptr;
  if (!IsKeyOf(option)) {
    Fail(where + ": is not a setting of idem " + section +
         (option != nullptr ? " (" + flag + " is for the command line only)" : "") +
         (dashed ? " (keys are written with '_')" : ""));
  }
  if (option->count() > 0) return;  // the command line wins

  std::vector<std::string> inputs;
  std::string text;
  if (const toml::array* array = node.as_array()) {
    for (const toml::node& item : *array) {
      if (!ScalarText(item, text)) Fail(where + ": must be an array of strings or numbers");
      inputs.push_back(text);
    }
  } else if (ScalarText(node, text)) {
    inputs.push_back(text);
  } else {
    Fail(where + ": must be a string, a number or a boolean");
  }
  if (option->get_expected_min() == 0) {  // a flag: true or false
    if (!node.is_boolean()) Fail(where + ": must be true or false");
    if (inputs.front() == "false") return;
    inputs = {option->get_flag_value(flag, "true")};
  } else if (option->get_expected_max() <= 1 && inputs.size() != 1) {
    Fail(where + ": takes one value");
  }
  try {
    option->add_result(inputs);
    option->run_callback();
  } catch (const CLI::Error& e) {
    Fail(where + ": " + e.what());
  }
}

void ApplyConfigFile(CLI::App& cmd, const std::string& section, const std::string& path) {
  {
    std::ifstream probe(path);
    if (!probe) Fail("--config: cannot read " + path + ": " + std::strerror(errno));
  }
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& begin = e.source().begin;
    Fail(path + ":" + std::to_string(begin.line) + ":" + std::to_string(begin.column) + ": " +
         std::string(e.description()));
  }
  for (const auto& [key, node] : root) {
    if (key.str() != section) {
      Fail(Where(path, key.source()) + ": " + std::string(key.str()) +
           ": idem " + section + " reads only the table [" + section + "]");
    }
  }
  const toml::node* table_node = root.get(section);
  if (table_node == nullptr) return;
  const toml::table* table = table_node->as_table();
  if (table == nullptr) {
    Fail(Where(path, table_node->source()) + ": must be a table: [" + section + "]");
  }
  for (const auto& [key, node] : *table) ApplyKey(cmd, path, section, key, node);
}

}  // namespace

CLI::Option* AddConfigFileOption(CLI::App& cmd, const std::string& section) {
  CLI::App* app = &cmd;
  CLI::Option* option = cmd.add_option_function<std::string>(
      "--config",
      [app, section](const std::string& path) { ApplyConfigFile(*app, section, path); },
      "TOML file with a [" + section + "] table: one key per flag (its name with '_' for '-',\n"
      "e.g. admin_listen = \"127.0.0.1:9091\"); flags given on the command line win over it;\n"
      "an unknown key is an error naming its line");
  option->configurable(false);
  return option;
}

CLI::Option* AddCheckConfigFlag(CLI::App& cmd, bool& check) {
  CLI::Option* option = cmd.add_flag(
      "--check-config", check,
      "Load and check the flags and the --config file, print what is wrong or 'configuration\n"
      "OK', and exit (0 when OK, 2 when not) without connecting to anything");
  option->configurable(false);
  return option;
}

void CommandLineOnly(CLI::Option* option) { option->configurable(false); }

Result<std::string> ReadSecretFile(const std::string& setting, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return InvalidArgumentError(setting + ": cannot read " + path + ": " + std::strerror(errno));
  }
  std::ostringstream content;
  content << in.rdbuf();
  std::string secret = content.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) return InvalidArgumentError(setting + ": " + path + " is empty");
  return secret;
}

}  // namespace idem::cli
