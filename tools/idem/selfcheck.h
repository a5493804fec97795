// `idem selfcheck`: drives a real store through every transition of the record state machine
// and prints what happened, as a quick proof that an installation works.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <ostream>
#include <string>

namespace idem::cli {

// Runs the self-check against the store at `store_url` (with `durable_store` non-empty, the
// tiered store: StoreOptions::durable_store). Returns the process exit code: 0 when every step
// behaved as specified, 1 when one did not, 2 when the store cannot be opened.
int RunSelfCheck(const std::string& store_url, const std::string& durable_store,
                 std::ostream& out);

// Adds `idem selfcheck` to `app`; returns a callback that runs it once parsed (exit code).
std::function<int()> AddSelfCheckCommand(CLI::App& app);

}  // namespace idem::cli
