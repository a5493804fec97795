// --unsafe-clock-offset-file FILE: for tests only, moves a running gateway's clock. The file
// holds a duration ("0s", "3h", "25h": ParseDuration's syntax, surrounding whitespace
// ignored); the gateway's clock (GatewayOptions::clock, which its store reads too) then runs
// that far ahead of the clock it was given. The file is read at start (a missing or malformed
// file is an error) and again every kReloadInterval while the gateway runs, so a test can jump a
// gateway hours ahead without restarting it: write the new offset to a temporary file and
// rename it over FILE (a rename is atomic; a half-written file would be read as malformed and
// ignored until the next read).
//
// Never for production: a clock moved forward expires leases and retention early, so a retry
// is executed again instead of replayed. The gateway logs a warning at start and at every change.
//
// Thread safety: Reload from one thread at a time; clock() from any.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "gateway/access_log.h"
#include "gateway/http.h"
#include "idem/clock.h"
#include "idem/status.h"

namespace idem::gateway {

class ClockOffsetFile {
 public:
  static constexpr std::chrono::milliseconds kReloadInterval{100};

  // Reads `path` once. kInvalidArgument (naming the file) if it cannot be read or does not hold
  // a duration.
  static Result<std::unique_ptr<ClockOffsetFile>> Open(std::string path,
                                                        std::shared_ptr<Clock> base);

  // The base clock plus the file's offset.
  std::shared_ptr<Clock> clock() const { return clock_; }
  Duration offset() const { return clock_->offset(); }
  const std::string& path() const { return path_; }

  // Reads the file again. The new offset if it changed, nullopt if not; an error (the offset is
  // kept) if the file cannot be read or is malformed.
  Result<std::optional<Duration>> Reload();

 private:
  ClockOffsetFile(std::string path, std::shared_ptr<OffsetClock> clock)
      : path_(std::move(path)), clock_(std::move(clock)) {}

  const std::string path_;
  const std::shared_ptr<OffsetClock> clock_;
};

// Reads `file` every kReloadInterval until the io_context stops, logging each new offset (and
// each new read error once) as a warning. `file` and `log` must outlive the io_context.
Task<void> FollowClockOffsetFile(ClockOffsetFile& file, Log& log);

}  // namespace idem::gateway
