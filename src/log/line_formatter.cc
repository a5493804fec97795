#include "log/line_formatter.h"

#include <algorithm>
#include <ctime>

namespace idem::logging {

void LineFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  if (prefix_ == Prefix::kTimeAndLevel) {
    using std::chrono::floor;
    const auto since_epoch = msg.time.time_since_epoch();
    const auto second = floor<std::chrono::seconds>(since_epoch);
    if (second != cached_second_) {
      const std::time_t t = static_cast<std::time_t>(second.count());
      std::tm tm{};
      gmtime_r(&t, &tm);
      char text[48];
      const size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
      if (n == cached_text_.size()) {
        std::copy_n(text, n, cached_text_.begin());
        cached_second_ = second;
      } else {  // a year outside 0000 to 9999: written as strftime made it, not cached
        dest.append(text, text + n);
      }
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch - second);
    const int m = static_cast<int>(ms.count());
    const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
    // Sized once, then copied: an append per piece costs several times more.
    const size_t time_size = second == cached_second_ ? cached_text_.size() : 0;
    const size_t start = dest.size();
    dest.resize(start + time_size + 6 + level.size() + 1);
    char* at = dest.data() + start;
    at = std::copy_n(cached_text_.data(), time_size, at);
    const char tail[] = {'.',
                         static_cast<char>('0' + m / 100),
                         static_cast<char>('0' + m / 10 % 10),
                         static_cast<char>('0' + m % 10),
                         'Z',
                         ' '};
    at = std::copy_n(tail, sizeof tail, at);
    at = std::copy_n(level.data(), level.size(), at);
    *at = ' ';
  }
  const size_t start = dest.size();
  dest.resize(start + msg.payload.size() + 1);
  char* at = std::copy_n(msg.payload.data(), msg.payload.size(), dest.data() + start);
  *at = '\n';
}

}  // namespace idem::logging
