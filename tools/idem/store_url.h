// A store URL with its password taken from a file (--store-password-file), so the password
// need not be on a command line or in a config file.
#pragma once

#include <string>

#include "idem/status.h"

namespace idem::cli {

// `url` with the password in `password_file` (ReadSecretFile) added to its user info,
// percent-encoded: postgresql://USER@HOST/DB -> postgresql://USER:PASSWORD@HOST/DB,
// redis://HOST -> redis://:PASSWORD@HOST, redis://USER@... is not accepted (a bare user info is a
// password to Redis). `url` itself when `password_file` is empty. kInvalidArgument, naming
// `setting`, when the file cannot be read, the URL already holds a password, or the store takes
// none (memory, sqlite:).
Result<std::string> StoreUrlWithPasswordFile(const std::string& url, const std::string& setting,
                                             const std::string& password_file);

}  // namespace idem::cli
