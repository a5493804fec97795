// Settle notices on PostgreSQL (Store::SubscribeSettled): one connection of the subscriber's
// own that LISTENs on idem_settled, the channel the record functions NOTIFY for watched
// records (pg_notices_sql.h). A NOTIFY reaches listeners only when its transaction commits.
#pragma once

#include <memory>

#include "idem/store.h"
#include "store/postgres/pg_url.h"

namespace idem::internal::pg {

Result<std::unique_ptr<Store::SettleSubscription>> SubscribePostgresSettled(
    PgConfig config, Store::SettleHandler handler);

}  // namespace idem::internal::pg
