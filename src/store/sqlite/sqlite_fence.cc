#include "store/sqlite/sqlite_fence.h"

#include <algorithm>

namespace idem::internal::sqlite {

Status FenceAllocator::Prepare(sqlite3* db) {
  db_ = db;
  IDEM_RETURN_IF_ERROR(read_.Prepare(db, "SELECT value FROM idem_meta WHERE name = 'fence'"));
  IDEM_RETURN_IF_ERROR(reserve_.Prepare(db, "UPDATE idem_meta SET value = ?1 WHERE name = 'fence'"));
  return data_version_.Prepare(db, "PRAGMA data_version");
}

Result<FencingToken> FenceAllocator::Next() {
  auto version = QueryInt(data_version_, db_, "data version");
  if (!version.ok()) return version.status();
  if (!known_ || *version != data_version_seen_) {
    auto reserved = QueryInt(read_, db_, "read fence");
    if (!reserved.ok()) return reserved.status();
    reserved_ = static_cast<FencingToken>(*reserved);
    next_ = std::max(next_, reserved_ + 1);
    known_ = true;
    data_version_seen_ = *version;
  }
  if (next_ > reserved_) {
    const FencingToken reservation = next_ + kBlock - 1;
    Use use(reserve_, db_);
    use.Int(1, static_cast<int64_t>(reservation));
    auto changed = use.Exec("reserve fence");
    if (!changed.ok()) return changed.status();
    if (*changed != 1) return DataLossError("idem_meta has no 'fence' row");
    reserved_ = reservation;
  }
  return next_++;
}

}  // namespace idem::internal::sqlite
