#include "migrate_command.h"

#include "idem/store.h"

namespace idem::cli {

int RunMigrate(const std::string& store_url, std::ostream& out, std::ostream& err) {
  auto migrated = Migrate(store_url);
  if (!migrated.ok()) {
    err << "idem migrate: " << migrated.status().ToString() << "\n";
    return 1;
  }
  out << "idem migrate: " << *migrated << "\n";
  return 0;
}

}  // namespace idem::cli
