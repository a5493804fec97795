#include "pg/pg_params.h"

#include <utility>

namespace idem::internal::pg {

PgParams& PgParams::Text(std::string value) {
  lengths_.push_back(static_cast<int>(value.size()));
  values_.push_back(std::move(value));
  null_.push_back(false);
  formats_.push_back(0);
  return *this;
}

PgParams& PgParams::Bytes(std::string value) {
  Text(std::move(value));
  formats_.back() = 1;
  return *this;
}

PgParams& PgParams::Null() {
  Text("");
  null_.back() = true;
  return *this;
}

const char* const* PgParams::values() const {
  pointers_.clear();
  for (size_t i = 0; i < values_.size(); ++i) {
    pointers_.push_back(null_[i] ? nullptr : values_[i].data());
  }
  return pointers_.data();
}

}  // namespace idem::internal::pg
