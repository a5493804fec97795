#include "worker/batch_envelope.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <unordered_map>

#include "core/text.h"

namespace idem::worker {

using Json = nlohmann::json;

namespace {

// Appends `text`, valid UTF-8, as a JSON string: copied with only '"', '\\' and control
// characters escaped.
void AppendUtf8(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  size_t plain = 0;  // start of the run not yet copied
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(text.substr(plain, i - plain));
    plain = i + 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 0xF];
        break;
    }
  }
  out.append(text.substr(plain));
  out += '"';
}

// Appends `text` as a JSON string; text that is not UTF-8 (a header value from a foreign
// producer, say) goes through nlohmann's writer, which replaces what it cannot write with U+FFFD.
void AppendString(std::string& out, std::string_view text) {
  if (internal::ValidUtf8(text)) {
    AppendUtf8(out, text);
  } else {
    out += Json(std::string(text)).dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

void AppendNumber(std::string& out, uint64_t n) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof buf, n).ptr;
  out.append(buf, end);
}

}  // namespace

// Written by hand rather than through nlohmann::json: building a json object per message cost
// about 7 us per message (32 messages of 128 bytes), as much as the rest of the sidecar's work
// on it; appending to one string costs a fraction of that. The tests parse the output back.
std::string EncodeBatch(const std::vector<BatchItem>& items) {
  size_t size = 16;
  for (const BatchItem& item : items) size += 160 + item.body.size() * 4 / 3;
  std::string out;
  out.reserve(size);
  out += "{\"messages\":[";
  bool first = true;
  for (const BatchItem& item : items) {
    if (!first) out += ',';
    first = false;
    out += "{\"idempotency_key\":";
    AppendString(out, item.idempotency_key);
    out += ",\"subject\":";
    AppendString(out, item.subject);
    out += ",\"stream\":";
    AppendString(out, item.stream);
    out += ",\"stream_sequence\":";
    AppendNumber(out, item.stream_sequence);
    out += ",\"delivery_count\":";
    AppendNumber(out, item.delivery_count);
    if (item.ordering_key) {
      out += ",\"ordering_key\":";
      AppendString(out, *item.ordering_key);
    }
    out += ",\"headers\":{";
    // A name that occurs more than once: one member, the values joined with ", ".
    for (size_t i = 0; i < item.headers.size(); ++i) {
      const std::string_view name = item.headers[i].first;
      bool seen_before = false;
      for (size_t j = 0; j < i && !seen_before; ++j) seen_before = item.headers[j].first == name;
      if (seen_before) continue;
      if (out.back() != '{') out += ',';
      AppendString(out, name);
      out += ':';
      std::string joined(item.headers[i].second);
      bool repeated = false;
      for (size_t j = i + 1; j < item.headers.size(); ++j) {
        if (item.headers[j].first != name) continue;
        joined += ", ";
        joined += item.headers[j].second;
        repeated = true;
      }
      AppendString(out, repeated ? std::string_view(joined) : item.headers[i].second);
    }
    out += '}';
    if (internal::ValidUtf8(item.body)) {
      out += ",\"body\":";
      AppendUtf8(out, item.body);
    } else {
      out += ",\"body_base64\":\"";
      out += internal::EncodeBase64(item.body);
      out += '"';
    }
    out += '}';
  }
  out += "]}";
  return out;
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
