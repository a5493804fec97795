// One-dimensional arrays in PostgreSQL's binary wire format, for parameters sent with
// PgParams::Bytes to a statement that casts them ($1::bigint[], ...).
//
// A relay's settle sends four arrays of a thousand elements each. As text, every element is
// formatted here and parsed again by the server (array_in); in binary it is copied as it is.
// The format is array_recv's: dimensions, a has-nulls flag, the element type's oid, each
// dimension's length and lower bound, then each element as a 4-byte length and its bytes, all
// big-endian. These arrays never hold a NULL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace idem::internal::pg {

// The element types the callers use, by their built-in oids (which never change).
enum class PgArrayElement : uint32_t { kBool = 16, kInt8 = 20, kInt4 = 23 };

namespace array_detail {
inline void PutBigEndian(std::string& out, uint64_t value, int bytes) {
  for (int shift = 8 * (bytes - 1); shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((value >> shift) & 0xff));
  }
}
inline int ElementSize(PgArrayElement type) {
  switch (type) {
    case PgArrayElement::kBool: return 1;
    case PgArrayElement::kInt4: return 4;
    case PgArrayElement::kInt8: return 8;
  }
  return 8;
}
}  // namespace array_detail

// Encodes `count` elements, element i being value(i) (an integer; a bool for kBool), as an
// array of `type`. An empty array has no dimensions, as PostgreSQL writes '{}'. An int4
// element keeps the low 32 bits of its value: the caller passes values that fit.
template <typename ValueOf>
std::string BinaryArray(PgArrayElement type, size_t count, ValueOf value) {
  using array_detail::PutBigEndian;
  const int size = array_detail::ElementSize(type);
  std::string out;
  out.reserve(20 + count * (4 + static_cast<size_t>(size)));
  PutBigEndian(out, count == 0 ? 0 : 1, 4);  // dimensions
  PutBigEndian(out, 0, 4);                   // no NULLs
  PutBigEndian(out, static_cast<uint32_t>(type), 4);
  if (count == 0) return out;
  PutBigEndian(out, count, 4);  // the dimension's length
  PutBigEndian(out, 1, 4);      // and lower bound
  for (size_t i = 0; i < count; ++i) {
    PutBigEndian(out, static_cast<uint32_t>(size), 4);
    PutBigEndian(out, static_cast<uint64_t>(static_cast<int64_t>(value(i))), size);
  }
  return out;
}

}  // namespace idem::internal::pg
