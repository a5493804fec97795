// A plain hiredis connection for tests that look at what a store wrote, or drive a server
// (CLUSTER SETSLOT, CONFIG SET) outside the store.
#pragma once

#include <hiredis/hiredis.h>

#include <string>
#include <vector>

namespace idem::testing {

class RawRedis {
 public:
  explicit RawRedis(int port) : context_(redisConnect("127.0.0.1", port)) {}
  ~RawRedis() {
    if (context_ != nullptr) redisFree(context_);
  }
  RawRedis(const RawRedis&) = delete;
  RawRedis& operator=(const RawRedis&) = delete;
  bool ok() const { return context_ != nullptr && context_->err == 0; }

  // The reply as text: integers and status replies too, "(nil)", "(error) ..." (also when the
  // connection failed), arrays one element per line.
  std::string Command(const std::vector<std::string>& argv) {
    if (!ok()) return "(error) cannot connect";
    std::vector<const char*> args;
    std::vector<size_t> lengths;
    for (const auto& a : argv) {
      args.push_back(a.data());
      lengths.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(redisCommandArgv(context_, static_cast<int>(args.size()),
                                                        args.data(), lengths.data()));
    if (r == nullptr) return "(error) no reply";
    std::string out = Text(r);
    freeReplyObject(r);
    return out;
  }

  // One command on a fresh connection to `port`.
  static std::string Once(int port, const std::vector<std::string>& argv) {
    return RawRedis(port).Command(argv);
  }

 private:
  static std::string Text(const redisReply* r) {
    switch (r->type) {
      case REDIS_REPLY_INTEGER: return std::to_string(r->integer);
      case REDIS_REPLY_NIL: return "(nil)";
      case REDIS_REPLY_ERROR: return "(error) " + std::string(r->str, r->len);
      case REDIS_REPLY_ARRAY: {
        std::string out;
        for (size_t i = 0; i < r->elements; ++i) out += (i ? "\n" : "") + Text(r->element[i]);
        return out;
      }
      default: return r->str != nullptr ? std::string(r->str, r->len) : std::string();
    }
  }

  redisContext* context_;
};

}  // namespace idem::testing
