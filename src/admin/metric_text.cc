#include "admin/metric_text.h"

namespace idem::admin {

void WriteMetricHeader(std::string& out, std::string_view name, std::string_view type,
                       std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace idem::admin
