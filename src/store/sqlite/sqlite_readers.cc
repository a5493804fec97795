#include "store/sqlite/sqlite_readers.h"

namespace idem::internal::sqlite {

ReaderPool::Reader::~Reader() {
  // The statement is finalized after this body runs; close_v2 waits for it.
  sqlite3_close_v2(db);
}

Status ReaderPool::Open(const std::string& path, int count,
                        std::chrono::milliseconds busy_timeout, const char* select_sql) {
  for (int i = 0; i < count; ++i) {
    auto reader = std::make_unique<Reader>();
    const int flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX;
    const int rc = sqlite3_open_v2(path.c_str(), &reader->db, flags, nullptr);
    if (rc != SQLITE_OK) return FromSqlite(rc, reader->db, "open a reader");
    sqlite3_extended_result_codes(reader->db, 1);
    sqlite3_busy_timeout(reader->db, static_cast<int>(busy_timeout.count()));
    IDEM_RETURN_IF_ERROR(reader->select.Prepare(reader->db, select_sql));
    readers_.push_back(std::move(reader));
  }
  MutexLock lock(mu_);
  for (auto& r : readers_) free_.push_back(r.get());
  return Status::Ok();
}

ReaderPool::Lease ReaderPool::Acquire() {
  MutexLock lock(mu_);
  while (free_.empty() || held_) cv_.Wait(lock);
  Reader* reader = free_.back();
  free_.pop_back();
  return Lease(*this, reader);
}

void ReaderPool::Return(Reader* reader) {
  MutexLock lock(mu_);
  free_.push_back(reader);
  cv_.NotifyAll();  // a reader waiting to Acquire, or HoldAll waiting for them all
}

void ReaderPool::HoldAll(const std::function<void()>& fn) {
  {
    MutexLock lock(mu_);
    while (held_) cv_.Wait(lock);
    held_ = true;
    while (free_.size() < readers_.size()) cv_.Wait(lock);
  }
  fn();
  MutexLock lock(mu_);
  held_ = false;
  cv_.NotifyAll();
}

}  // namespace idem::internal::sqlite
