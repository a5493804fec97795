// An enum's names as a table of {value, name} pairs, written once beside the enum's *Name
// function: NameOf looks a value up. (A switch per enum wrote the same lookup again for each.)
#pragma once

#include <cstddef>
#include <string_view>

namespace idem::internal {

template <typename Enum>
struct EnumName {
  Enum value;
  std::string_view name;
};

// The name `names` gives `value`, or `unknown` when the table has no entry for it.
template <typename Enum, size_t N>
constexpr std::string_view NameOf(const EnumName<Enum> (&names)[N], Enum value,
                                  std::string_view unknown) {
  for (const EnumName<Enum>& entry : names) {
    if (entry.value == value) return entry.name;
  }
  return unknown;
}

}  // namespace idem::internal
