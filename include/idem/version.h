// The idem release this build belongs to.
#pragma once

#include <string_view>

namespace idem {

inline constexpr std::string_view kVersion = "0.1.0";

}  // namespace idem
