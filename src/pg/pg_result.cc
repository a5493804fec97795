#include "pg/pg_result.h"

#include <string>

namespace idem::internal::pg {

bool ColumnIsNull(const PGresult* result, int row, int column) {
  return PQgetisnull(result, row, column) != 0;
}

std::string_view ColumnBytes(const PGresult* result, int row, int column) {
  return {PQgetvalue(result, row, column),
          static_cast<size_t>(PQgetlength(result, row, column))};
}

Result<int64_t> ColumnInt(const PGresult* result, int row, int column) {
  if (ColumnIsNull(result, row, column)) {
    return DataLossError("column " + std::to_string(column) + " is NULL");
  }
  const std::string_view bytes = ColumnBytes(result, row, column);
  if (bytes.size() != 1 && bytes.size() != 2 && bytes.size() != 4 && bytes.size() != 8) {
    return DataLossError("column " + std::to_string(column) + " is not a binary integer");
  }
  uint64_t value = 0;
  for (unsigned char c : bytes) value = (value << 8) | c;
  // Sign-extend the narrower widths.
  const int bits = static_cast<int>(bytes.size()) * 8;
  if (bits < 64 && (value >> (bits - 1)) != 0) value |= ~uint64_t{0} << bits;
  return static_cast<int64_t>(value);
}

Status ExpectOneRow(const PGresult* result, int columns) {
  if (PQntuples(result) != 1 || PQnfields(result) != columns) {
    return DataLossError("expected 1 row of " + std::to_string(columns) + " columns, got " +
                         std::to_string(PQntuples(result)) + " of " +
                         std::to_string(PQnfields(result)));
  }
  return Status::Ok();
}

Result<bool> DecodeBool(const PGresult* result) {
  IDEM_RETURN_IF_ERROR(ExpectOneRow(result, 1));
  auto value = ColumnInt(result, 0, 0);
  if (!value.ok()) return value.status();
  return *value != 0;
}

Result<int64_t> DecodeInt(const PGresult* result) {
  IDEM_RETURN_IF_ERROR(ExpectOneRow(result, 1));
  return ColumnInt(result, 0, 0);
}

}  // namespace idem::internal::pg
