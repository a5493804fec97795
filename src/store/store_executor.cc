#include "idem/store_executor.h"

#include <algorithm>

namespace idem {

StoreExecutor::StoreExecutor(Store& store, Options options)
    : store_(store),
      max_pending_(std::max(1, options.max_pending)),
      pool_(static_cast<size_t>(std::max(1, options.threads))) {}

StoreExecutor::~StoreExecutor() { pool_.join(); }

}  // namespace idem
