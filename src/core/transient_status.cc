#include "core/transient_status.h"

namespace idem::internal {

bool IsTransientHttpStatus(int status, AlsoTransient also) {
  if (status >= 500) return true;
  switch (status) {
    case 408:  // Request Timeout
    case 429:  // Too Many Requests
      return true;
    case 409:  // Conflict
      return also.conflict;
    case 425:  // Too Early
      return also.too_early;
    default:
      return false;
  }
}

}  // namespace idem::internal
