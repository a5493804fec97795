// Settle notices on PostgreSQL (ExecutionHooks::SubscribeSettled): one connection of the
// subscriber's own that LISTENs on idem_settled, the channel the record functions NOTIFY for
// watched records (sql/schema/notices.sql). A NOTIFY reaches listeners only when its
// transaction commits.
#pragma once

#include <memory>

#include "store/store_execution.h"
#include "pg/pg_url.h"

namespace idem::internal::pg {

// The channel idem_notify_settled and idem_notify_completed notify on.
inline constexpr const char* kSettleChannel = "idem_settled";

Result<std::unique_ptr<SettleSubscription>> SubscribePostgresSettled(
    PgConfig config, SettleHandler handler);

}  // namespace idem::internal::pg
