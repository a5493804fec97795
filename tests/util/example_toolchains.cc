#include "util/example_toolchains.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "util/process.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;

// The path of `name` in PATH, or "".
std::string FindProgram(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path == nullptr ? "/usr/local/bin:/usr/bin:/bin" : path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Runs `argv` to its end (output in `log_path`); "" if it exited 0, else its output.
std::string Run(const std::vector<std::string>& argv, const std::string& log_path,
                std::chrono::seconds timeout) {
  Process process(argv, log_path);
  const auto status = process.WaitForExit(timeout);
  if (!status) return "timed out after " + std::to_string(timeout.count()) + " s:\n" + process.Output();
  if (WIFEXITED(*status) && WEXITSTATUS(*status) == 0) return "";
  return process.Output().empty() ? std::string("failed without output") : process.Output();
}

ExampleCommand Python(const std::string& source_dir, const std::string& work_dir) {
  // Debian's python3-psycopg2 serves /usr/bin/python3, which a python3 earlier in PATH (a
  // virtualenv, pyenv) may not be.
  for (const std::string& python : {std::string("/usr/bin/python3"), FindProgram("python3")}) {
    if (python.empty() || ::access(python.c_str(), X_OK) != 0) continue;
    if (Run({python, "-c", "import psycopg2"}, work_dir + "/python-check.log", 30s).empty()) {
      return {{python, source_dir + "/examples/python/payments_service.py"}, "", ""};
    }
  }
  return {{}, "no python3 that imports psycopg2 (apt-get install python3-psycopg2)", ""};
}

ExampleCommand Go(const std::string& source_dir, const std::string& work_dir) {
  const std::string go = FindProgram("go");
  if (go.empty()) return {{}, "no go in PATH (apt-get install golang-go)", ""};
  const std::string gopath = "/usr/share/gocode";
  if (!std::filesystem::exists(gopath + "/src/github.com/lib/pq/conn.go")) {
    return {{}, "github.com/lib/pq is not in " + gopath + " (apt-get install golang-github-lib-pq-dev)", ""};
  }
  // GOPATH mode (go.mod ignored) against Debian's sources: no module download. GOPATH mode
  // builds only a relative package path, hence the directory change (env -C).
  const std::string binary = work_dir + "/payments-go";
  const std::string error = Run(
      {"/usr/bin/env", "-C", source_dir + "/examples/go", "GO111MODULE=off", "GOPATH=" + gopath,
       "GOFLAGS=", go, "build", "-o", binary, "."},
      work_dir + "/go-build.log", 300s);
  if (!error.empty()) return {{}, "", "go build failed: " + error};
  return {{binary}, "", ""};
}

ExampleCommand Node(const std::string& source_dir, const std::string& work_dir) {
  const std::string node = FindProgram("node");
  const std::string npm = FindProgram("npm");
  if (node.empty() || npm.empty()) return {{}, "no node or npm in PATH (apt-get install nodejs npm)", ""};
  const std::string dir = source_dir + "/examples/node";
  // npm ci installs exactly the lock file's versions and never rewrites it; --prefer-offline
  // takes them from npm's cache when it holds them.
  const std::string error = Run({npm, "ci", "--prefer-offline", "--no-audit", "--no-fund",
                                 "--prefix", dir},
                                work_dir + "/npm-ci.log", 300s);
  if (!error.empty()) {
    for (const char* offline : {"ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT",
                                "ENETUNREACH"}) {
      if (error.find(offline) != std::string::npos) {
        return {{}, "npm could not reach its registry to install pg (" + std::string(offline) + ")", ""};
      }
    }
    return {{}, "", "npm ci failed: " + error};
  }
  return {{node, dir + "/payments_service.js"}, "", ""};
}

}  // namespace

ExampleCommand PrepareExample(const std::string& language, const std::string& source_dir,
                              const std::string& work_dir) {
  if (language == "python") return Python(source_dir, work_dir);
  if (language == "go") return Go(source_dir, work_dir);
  if (language == "node") return Node(source_dir, work_dir);
  return {{}, "", "no example in language '" + language + "'"};
}

}  // namespace idem::testing
