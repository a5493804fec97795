// WalIndexHeader: whether any connection has committed to a WAL database since an earlier
// look, told without a read transaction (no lock, no system call).
//
// Every connection to a database in WAL mode shares its wal-index (the "-shm" file, mapped by
// each process), whose header every commit rewrites: it holds a change counter that each
// commit increments, the WAL's last frame and its running checksum, and the WAL's salts (new
// at each restart). SQLite itself starts each read transaction by copying this header and
// comparing it with the copy it read last (that is how PRAGMA data_version learns of other
// connections' commits), and it reads the header without a lock, as here: the writer writes
// the header's second copy, then a memory barrier, then the first; a reader reads the first,
// then a barrier, then the second, and retries if they differ. Two equal copies read at two
// moments mean no commit landed in between. (The format is SQLite's documented WAL-index
// header, stable since 3.7.0, version 3007000; anything else is treated as "cannot tell".)
//
// The header is found through the database's own VFS (xShmMap of region 0, which the
// connection has mapped since its first read), so this sees exactly the memory SQLite uses;
// a VFS without shared memory gives no header, and the caller must ask SQLite instead.
//
// Thread safety: Attach under the connection's lock, before other use; Read from any thread
// while the connection is open (the words are read atomically, as the other connections
// write them).
#pragma once

#include <sqlite3.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace idem::internal::sqlite {

class WalIndexHeader {
 public:
  // One copy of the header: twelve 32-bit words (48 bytes).
  using Snapshot = std::array<uint32_t, 12>;

  // Finds the wal-index of `db`'s main database. False if it has none (a VFS without shared
  // memory, or a database not in WAL mode): Read then always answers nullopt.
  bool Attach(sqlite3* db) {
    sqlite3_file* file = nullptr;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK ||
        file == nullptr || file->pMethods == nullptr || file->pMethods->iVersion < 2 ||
        file->pMethods->xShmMap == nullptr) {
      return false;
    }
    void volatile* region = nullptr;
    constexpr int kRegionSize = 32768;  // SQLite's wal-index page size
    if (file->pMethods->xShmMap(file, 0, kRegionSize, 0, &region) != SQLITE_OK ||
        region == nullptr) {
      return false;
    }
    words_ = static_cast<const uint32_t*>(const_cast<const void*>(region));
    return Read().has_value();
  }

  // A consistent copy of the header now; nullopt if there is none (not attached, not
  // initialised, an unknown version) or a commit was rewriting it during the read.
  std::optional<Snapshot> Read() const {
    if (words_ == nullptr) return std::nullopt;
    Snapshot first{}, second{};
    for (size_t i = 0; i < first.size(); ++i) {
      first[i] = __atomic_load_n(&words_[i], __ATOMIC_RELAXED);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    for (size_t i = 0; i < second.size(); ++i) {
      second[i] = __atomic_load_n(&words_[second.size() + i], __ATOMIC_RELAXED);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    constexpr uint32_t kVersion = 3007000;
    // Word 3 starts with isInit (one byte, 1 once the header is set).
    const auto* bytes = reinterpret_cast<const unsigned char*>(first.data());
    if (first != second || first[0] != kVersion || bytes[12] != 1) return std::nullopt;
    return first;
  }

 private:
  const uint32_t* words_ = nullptr;
};

}  // namespace idem::internal::sqlite
