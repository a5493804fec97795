// Text for the relay's log lines.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

namespace idem::outbox {

// `text` on one line: libpq's messages carry newlines and tabs, which become single spaces.
std::string OneLine(std::string text);

// `parts` joined with ", ".
std::string Join(const std::vector<std::string>& parts);

}  // namespace idem::outbox
