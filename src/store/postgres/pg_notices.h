// Settle notices on PostgreSQL (Store::SubscribeSettled): one connection of the subscriber's
// own that LISTENs on idem_settled, the channel the record functions NOTIFY for watched
// records (sql/schema/notices.sql). A NOTIFY reaches listeners only when its transaction commits.
#pragma once

#include <memory>

#include "idem/store.h"
#include "pg/pg_url.h"

namespace idem::internal::pg {

// The channel idem_notify_settled and idem_notify_completed notify on.
inline constexpr const char* kSettleChannel = "idem_settled";

Result<std::unique_ptr<Store::SettleSubscription>> SubscribePostgresSettled(
    PgConfig config, Store::SettleHandler handler);

}  // namespace idem::internal::pg
