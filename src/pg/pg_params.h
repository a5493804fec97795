// Parameters of one statement, in the arrays libpq takes: text for numbers and strings, binary
// for bytea (and the arrays of pg_binary_array.h), or NULL.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace idem::internal::pg {

class PgParams {
 public:
  PgParams& Text(std::string value);
  PgParams& Bytes(std::string value);
  PgParams& Int(int64_t value) { return Text(std::to_string(value)); }
  PgParams& Null();

  int size() const { return static_cast<int>(values_.size()); }
  // Pointer arrays for libpq; valid while this object lives and is not changed.
  const char* const* values() const;
  const int* lengths() const { return lengths_.data(); }
  const int* formats() const { return formats_.data(); }

 private:
  std::vector<std::string> values_;
  std::vector<bool> null_;
  std::vector<int> lengths_;
  std::vector<int> formats_;
  mutable std::vector<const char*> pointers_;
};

}  // namespace idem::internal::pg
