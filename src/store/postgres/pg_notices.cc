#include "store/postgres/pg_notices.h"

#include <string>
#include <utility>

#include "pg/pg_connection.h"
#include "store/settle_listener.h"
#include "store/settle_notice.h"

namespace idem::internal::pg {
namespace {

class PgNoticeSource final : public NoticeSource {
 public:
  explicit PgNoticeSource(std::unique_ptr<PgConnection> conn) : conn_(std::move(conn)) {}

  int fd() const override { return PQsocket(conn_->raw()); }

  Status Drain(bool read,
               const std::function<void(const SettleNotice&)>& deliver) override {
    PGconn* raw = conn_->raw();
    if (read && (PQconsumeInput(raw) == 0 || PQstatus(raw) != CONNECTION_OK)) {
      return UnavailableError(std::string("postgresql listener: ") + PQerrorMessage(raw));
    }
    while (PGnotify* notice = PQnotifies(raw)) {
      const ParsedNotice parsed = ParsePostgresNotice(notice->extra);
      PQfreemem(notice);
      if (!parsed.digest.empty()) deliver(parsed.view());
    }
    return Status::Ok();
  }

 private:
  std::unique_ptr<PgConnection> conn_;
};

Result<std::unique_ptr<NoticeSource>> OpenSource(const PgConfig& config) {
  auto conn = PgConnection::Connect(config.keywords, config.values, config.timeout);
  if (!conn.ok()) return conn.status().WithContext(config.display);
  auto listening = (*conn)->Exec("listen", std::string("LISTEN ") + kSettleChannel);
  if (!listening.ok()) return listening.status().WithContext(config.display);
  return std::unique_ptr<NoticeSource>(std::make_unique<PgNoticeSource>(std::move(*conn)));
}

}  // namespace

Result<std::unique_ptr<SettleSubscription>> SubscribePostgresSettled(
    PgConfig config, SettleHandler handler) {
  auto first = OpenSource(config);
  // A refusal retrying cannot fix (authentication, say) fails the call; an unreachable server
  // is retried by the listener's own thread.
  if (!first.ok() && first.status().code() != StatusCode::kUnavailable) return first.status();
  std::unique_ptr<NoticeSource> source = first.ok() ? std::move(*first) : nullptr;
  return std::unique_ptr<SettleSubscription>(std::make_unique<SettleListener>(
      [config = std::move(config)] { return OpenSource(config); }, std::move(source),
      std::move(handler)));
}

}  // namespace idem::internal::pg
