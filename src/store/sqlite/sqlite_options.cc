#include "store/sqlite/sqlite_options.h"

#include <string>

#include "core/text.h"

namespace idem {

std::string_view DurabilityName(Durability durability) {
  switch (durability) {
    case Durability::kOff: return "off";
    case Durability::kNormal: return "normal";
    case Durability::kFull: return "full";
  }
  return "normal";
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
        if (name == "replay_cache_entries") {
          auto entries = internal::ParseIntInRange("replay_cache_entries", value, 0, 10'000'000);
          if (!entries.ok()) return entries.status();
          options.replay_cache_entries = static_cast<int>(*entries);
          return Status::Ok();
        }
        if (name == "replay_cache_mb") {
          auto mb = internal::ParseIntInRange("replay_cache_mb", value, 1, 65'536);
          if (!mb.ok()) return mb.status();
          options.replay_cache_mb = static_cast<int>(*mb);
          return Status::Ok();
        }
        return InvalidArgumentError("unknown sqlite store option '" + std::string(name) +
                                    "' (known: durability, busy_timeout_ms, sweep_batch, "
                                    "replay_cache_entries, replay_cache_mb)");
      });
  if (!applied.ok()) return applied;
  return options;
}

}  // namespace idem
