// The fingerprint of one fixed request (POST / with the body "x"), for store tests that need a
// fingerprint but not a particular one.
#pragma once

#include "idem/fingerprint.h"

namespace idem::testing {

inline Fingerprint Fp() { return *ComputeFingerprint({}, {"POST", "/", "", "x", {}}); }

}  // namespace idem::testing
