// The header Idem-Ordering-Key (idem::outbox::kOrderingKeyHeader) on the messages the relay
// publishes: a row's ordering key as a header value, and a row's headers with it.
//
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace idem::outbox {

// The header value for `key`: the key as it is, unless it holds a control character (U+0001
// to U+001F, U+007F: possible only in rows enqueued before idem.outbox_enqueue refused them),
// which a header value cannot carry; then every control character and every '%' is written
// %XX (upper-case hex). Either way one key always gives one value.
std::string OrderingKeyHeaderValue(std::string_view key);

// Drops every header named Idem-Ordering-Key (any case) from `headers`, then, when `key` is
// set, appends Idem-Ordering-Key with OrderingKeyHeaderValue(*key). Returns whether a header
// of that name was dropped (a row that set one itself).
bool SetOrderingKeyHeader(std::vector<std::pair<std::string, std::string>>& headers,
                          const std::optional<std::string>& key);

}  // namespace idem::outbox
