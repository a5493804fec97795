// Runs the built `idem` binary with some arguments and returns its exit code and output
// (standard output and standard error together), for the command-line tests.
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <string>
#include <vector>

#include "util/build_tree.h"
#include "util/process.h"
#include "util/temp_dir.h"

namespace idem::testing {

struct IdemRun {
  int exit_code = -1;  // -1: no exit within 30 s, or killed by a signal
  std::string output;
};

inline IdemRun RunIdem(TempDir& dir, const std::vector<std::string>& args) {
  static int runs = 0;
  std::vector<std::string> argv = {idem::build_tree::kIdemBinary};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p(argv, dir.File("idem-" + std::to_string(++runs) + ".log"));
  IdemRun run;
  auto status = p.WaitForExit(std::chrono::seconds(30));
  if (status && WIFEXITED(*status)) run.exit_code = WEXITSTATUS(*status);
  run.output = p.Output();
  return run;
}

}  // namespace idem::testing
