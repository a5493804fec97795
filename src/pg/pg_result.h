// An owned libpq result, and readers of its binary-format columns and of one-value rows.
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <string_view>

#include "idem/status.h"

namespace idem::internal::pg {

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

// Binary-format result columns.
Result<int64_t> ColumnInt(const PGresult* result, int row, int column);
bool ColumnIsNull(const PGresult* result, int row, int column);
std::string_view ColumnBytes(const PGresult* result, int row, int column);

// kDataLoss unless `result` holds exactly one row of `columns` columns.
Status ExpectOneRow(const PGresult* result, int columns);

// The one value of a one-row, one-column binary result, as a boolean or an integer. kDataLoss
// when the result is not that, or the value is NULL.
Result<bool> DecodeBool(const PGresult* result);
Result<int64_t> DecodeInt(const PGresult* result);

}  // namespace idem::internal::pg
