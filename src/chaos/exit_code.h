// The exit code of `idem chaos`, decided in one place (docs/chaos.md and `idem chaos --help`
// list the codes).
#pragma once

namespace idem::chaos {

inline constexpr int kExitExactlyOnce = 0;     // every operation took effect exactly once
inline constexpr int kExitNotExactlyOnce = 1;  // an operation escaped (twice) or was lost
inline constexpr int kExitNoVerdict = 2;       // bad flags, could not start, or broke off
inline constexpr int kExitHarnessFailed = 3;   // exactly once, but a planned fault not injected

// How a run that started ended, as far as its exit code goes.
struct RunEnd {
  bool verdict = true;     // false: the run broke off, or its evidence could not be read
  int escaped = 0;         // distinct operations with a duplicate or wrong effect
  int lost = 0;            // distinct operations with no effect
  int harness_failed = 0;  // planned faults the harness could not inject (or finish injecting)
};

// kExitNoVerdict without a verdict; else kExitNotExactlyOnce when anything escaped or was lost,
// whatever the harness did (a duplicate is the finding that matters most); else
// kExitHarnessFailed when a planned fault was not injected (the run proved less than it was
// asked to); else kExitExactlyOnce.
constexpr int ExitCode(const RunEnd& end) {
  if (!end.verdict) return kExitNoVerdict;
  if (end.escaped + end.lost > 0) return kExitNotExactlyOnce;
  if (end.harness_failed > 0) return kExitHarnessFailed;
  return kExitExactlyOnce;
}

}  // namespace idem::chaos
