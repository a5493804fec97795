#include "sweep/sweeper.h"

#include "outbox/outbox_db.h"
#include "pg/pg_connection.h"
#include "pg/pg_schema.h"
#include "pg/pg_url.h"

namespace idem::sweep {

Result<SweepReport> SweepOnce(const SweepOptions& options) {
  if (options.outbox_retention_days > 366) {
    return InvalidArgumentError("sweep: outbox retention must be 0 to 366 days");
  }
  if (options.horizon_days < 0 || options.horizon_days > 366) {
    return InvalidArgumentError("sweep: horizon must be 0 to 366 days");
  }
  auto config = internal::pg::ParsePostgresUrl(options.db_url);
  if (!config.ok()) return config.status();
  auto conn = internal::pg::PgConnection::Connect(config->keywords, config->values,
                                                  config->timeout + std::chrono::seconds(1));
  if (!conn.ok()) return conn.status().WithContext(config->display);
  auto version = internal::pg::MigrateSchema(**conn, config->schema);
  if (!version.ok()) return version.status().WithContext(config->display);

  SweepReport report;
  std::optional<std::chrono::system_clock::time_point> now;
  if (options.unsafe_clock_offset.count() != 0) {
    now = std::chrono::system_clock::now() + options.unsafe_clock_offset;
  }
  auto inbox = worker::InboxSweepSteps((*conn)->raw(), now, options.horizon_days);
  if (!inbox.ok()) return inbox.status().WithContext(config->display);
  report.inbox = *inbox;
  if (options.outbox_retention_days >= 0) {
    auto dropped = outbox::SweepOutbox(**conn, options.outbox_retention_days);
    if (!dropped.ok()) return dropped.status().WithContext(config->display);
    report.outbox_swept = true;
    report.outbox_partitions_dropped = *dropped;
  }
  return report;
}

std::string Describe(const SweepReport& report, const SweepOptions& options) {
  const auto& in = report.inbox;
  std::string line = "inbox: dropped " + std::to_string(in.claims_dropped) + " claim(s) in " +
                     std::to_string(in.partitions_dropped) + " expired day partition(s), created " +
                     std::to_string(in.partitions_created) + " partition(s) for the days ahead";
  if (in.partitions_busy > 0) {
    line += ", " + std::to_string(in.partitions_busy) +
            " busy (a lock not granted in time; left for the next run)";
  }
  line += " (" + std::to_string(in.steps) + " step(s)); outbox: ";
  if (report.outbox_swept) {
    line += "dropped " + std::to_string(report.outbox_partitions_dropped) +
            " day partition(s) of published rows older than " +
            std::to_string(options.outbox_retention_days) + " days";
  } else {
    line += "left alone";
  }
  return line;
}

}  // namespace idem::sweep
