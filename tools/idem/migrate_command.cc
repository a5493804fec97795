#include "migrate_command.h"

#include "idem/store.h"
#include "store/postgres/pg_url.h"
#include "store/postgres/postgres_store.h"

namespace idem::cli {

int RunMigrate(const std::string& store_url, std::ostream& out, std::ostream& err) {
  if (internal::pg::IsPostgresUrl(store_url)) {
    auto version = MigratePostgresSchema(store_url);
    if (!version.ok()) {
      err << "idem migrate: " << version.status().ToString() << "\n";
      return 1;
    }
    auto config = internal::pg::ParsePostgresUrl(store_url);
    out << "idem migrate: " << (config.ok() ? config->display : "store")
        << " schema version " << *version << "\n";
    return 0;
  }
  auto store = OpenStore(store_url);
  if (!store.ok()) {
    err << "idem migrate: " << store.status().ToString() << "\n";
    return 1;
  }
  out << "idem migrate: " << (*store)->Describe() << " schema is current\n";
  return 0;
}

}  // namespace idem::cli
