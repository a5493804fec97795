#include "worker/batch_envelope.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <unordered_map>

#include "core/text.h"

namespace idem::worker {

using Json = nlohmann::json;

std::string EncodeBatch(const std::vector<BatchItem>& items) {
  Json messages = Json::array();
  for (const BatchItem& item : items) {
    Json m = Json::object();
    m["idempotency_key"] = item.idempotency_key;
    m["subject"] = item.subject;
    m["stream"] = item.stream;
    m["stream_sequence"] = item.stream_sequence;
    m["delivery_count"] = item.delivery_count;
    if (item.ordering_key) m["ordering_key"] = *item.ordering_key;
    Json headers = Json::object();
    for (const auto& [name, value] : item.headers) {
      Json& slot = headers[std::string(name)];
      if (slot.is_string()) {
        slot = slot.get<std::string>() + ", " + std::string(value);
      } else {
        slot = value;
      }
    }
    m["headers"] = std::move(headers);
    if (internal::ValidUtf8(item.body)) {
      m["body"] = item.body;
    } else {
      m["body_base64"] = internal::EncodeBase64(item.body);
    }
    messages.push_back(std::move(m));
  }
  Json envelope = Json::object();
  envelope["messages"] = std::move(messages);
  // Keys, subjects and header values are not checked for UTF-8 here: keep what cannot be
  // written rather than fail the whole batch (a key is visible ASCII; the rest comes from NATS).
  return envelope.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string_view ItemOutcomeName(ItemResult::Outcome o) {
  switch (o) {
    case ItemResult::Outcome::kAck:
      return "ack";
    case ItemResult::Outcome::kRetry:
      return "retry";
    case ItemResult::Outcome::kReject:
      return "reject";
    case ItemResult::Outcome::kMissing:
      return "missing";
  }
  return "?";
}

Result<std::vector<ItemResult>> DecodeBatchResults(std::string_view body,
                                                   const std::vector<std::string_view>& keys) {
  const Json doc = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgumentError("the batch response is not JSON");
  const auto results = doc.is_object() ? doc.find("results") : doc.end();
  if (!doc.is_object() || results == doc.end() || !results->is_array()) {
    return InvalidArgumentError("the batch response has no \"results\" array");
  }
  std::unordered_map<std::string_view, size_t> index;
  index.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) index.emplace(keys[i], i);

  std::vector<ItemResult> out(keys.size());
  std::vector<bool> listed(keys.size(), false);
  size_t n = 0;
  for (const Json& entry : *results) {
    const std::string at = "results[" + std::to_string(n++) + "]";
    if (!entry.is_object()) return InvalidArgumentError(at + " is not an object");
    const auto key = entry.find("idempotency_key");
    if (key == entry.end() || !key->is_string()) {
      return InvalidArgumentError(at + " has no string \"idempotency_key\"");
    }
    const std::string& key_text = key->get_ref<const std::string&>();
    const auto found = index.find(key_text);
    if (found == index.end()) {
      return InvalidArgumentError(at + " names key '" + key_text.substr(0, 255) +
                                  "', which is not in the batch");
    }
    const auto outcome = entry.find("outcome");
    const std::string* outcome_text =
        outcome != entry.end() && outcome->is_string() ? &outcome->get_ref<const std::string&>()
                                                       : nullptr;
    ItemResult r;
    if (outcome_text && *outcome_text == "ack") {
      r.outcome = ItemResult::Outcome::kAck;
    } else if (outcome_text && *outcome_text == "retry") {
      r.outcome = ItemResult::Outcome::kRetry;
    } else if (outcome_text && *outcome_text == "reject") {
      r.outcome = ItemResult::Outcome::kReject;
    } else {
      return InvalidArgumentError(at + " (key '" + key_text.substr(0, 255) +
                                  "') has no \"outcome\" \"ack\", \"retry\" or \"reject\"");
    }
    if (const auto error = entry.find("error"); error != entry.end() && !error->is_null()) {
      r.error = error->is_string() ? error->get<std::string>() : error->dump();
    }
    if (const auto after = entry.find("retry_after");
        after != entry.end() && after->is_number()) {
      const double secs = after->get<double>();
      if (std::isfinite(secs) && secs >= 0) {
        r.retry_after = Duration(static_cast<int64_t>(std::min(secs, 86400.0) * 1000));
      }
    }
    const size_t i = found->second;
    if (listed[i]) {
      if (out[i].outcome != r.outcome) {
        return InvalidArgumentError("key '" + key_text.substr(0, 255) +
                                    "' is listed twice with different outcomes");
      }
      continue;  // the same answer twice: the first entry counts
    }
    listed[i] = true;
    out[i] = std::move(r);
  }
  return out;
}

}  // namespace idem::worker
