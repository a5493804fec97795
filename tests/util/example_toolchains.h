// The toolchains of the examples in other languages (examples/python, examples/go,
// examples/node): how to start each payments service, after building or installing what it
// needs, or why it cannot run on this machine.
#pragma once

#include <string>
#include <vector>

namespace idem::testing {

struct ExampleCommand {
  std::vector<std::string> argv;  // the service's command line, when it can run
  std::string skip;               // why it cannot: its toolchain is absent (say what to install)
  std::string error;              // why it could not be prepared although the toolchain is there
};

// Prepares the example of `language` ("python", "go" or "node") from the source tree
// `source_dir`, with `work_dir` for what it builds:
//   python  the first python3 that imports psycopg2 (Debian's python3-psycopg2 installs it for
//           /usr/bin/python3);
//   go      `go build` in GOPATH mode against Debian's Go sources (golang-go,
//           golang-github-lib-pq-dev), offline;
//   node    `npm ci` of the package lock into examples/node/node_modules, then node; an
//           unreachable registry (and nothing cached) is reported as a skip.
// Blocks until the build or install ends.
ExampleCommand PrepareExample(const std::string& language, const std::string& source_dir,
                              const std::string& work_dir);

}  // namespace idem::testing
