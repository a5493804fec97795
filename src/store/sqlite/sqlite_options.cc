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
        // The options that are a count: name, range, and where the value goes.
        struct CountOption {
          std::string_view name;
          int64_t min, max;
          int* field;
        };
        for (const CountOption& o : {
                 CountOption{"sweep_batch", 1, 1'000'000, &options.sweep_batch},
                 CountOption{"replay_cache_entries", 0, 10'000'000,
                             &options.replay_cache_entries},
                 CountOption{"replay_cache_mb", 1, 65'536, &options.replay_cache_mb},
             }) {
          if (name != o.name) continue;
          auto count = internal::ParseIntInRange(o.name, value, o.min, o.max);
          if (!count.ok()) return count.status();
          *o.field = static_cast<int>(*count);
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
