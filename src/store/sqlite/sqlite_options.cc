#include "store/sqlite/sqlite_options.h"

#include <string>

#include "core/enum_names.h"
#include "core/text.h"

namespace idem {

std::string_view DurabilityName(Durability durability) {
  using enum Durability;
  static constexpr internal::EnumName<Durability> kNames[] = {
      {kOff, "off"}, {kNormal, "normal"}, {kFull, "full"}};
  return internal::NameOf(kNames, durability, "normal");
}

Result<SqliteOptions> ParseSqliteOptions(std::string_view query) {
  SqliteOptions options;
  Status applied = internal::ForEachQueryOption(
      query, [&](std::string_view name, std::string_view value) -> Status {
        if (name == "durability") {
          if (value == "off") options.durability = Durability::kOff;
          else if (value == "normal") options.durability = Durability::kNormal;
          else if (value == "full") options.durability = Durability::kFull;
          else return InvalidArgumentError("durability must be off, normal or full, not '" +
                                           std::string(value) + "'");
          return Status::Ok();
        }
        if (name == "busy_timeout_ms") {
          auto ms = internal::ParseIntInRange("busy_timeout_ms", value, 0, 3'600'000);
          if (!ms.ok()) return ms.status();
          options.busy_timeout = Duration(*ms);
          return Status::Ok();
        }
        if (name == "sweep_batch") {
          auto rows = internal::ParseIntInRange("sweep_batch", value, 1, 1'000'000);
          if (!rows.ok()) return rows.status();
          options.sweep_batch = static_cast<int>(*rows);
          return Status::Ok();
        }
        return InvalidArgumentError("unknown sqlite store option '" + std::string(name) +
                                    "' (known: durability, busy_timeout_ms, sweep_batch)");
      });
  if (!applied.ok()) return applied;
  return options;
}

}  // namespace idem
