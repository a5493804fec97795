// Runs a task on a Boost.Asio thread pool and hands back its result as a std::future.
#pragma once

#include <future>
#include <type_traits>

#include <boost/asio/packaged_task.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

namespace idem::outbox {

// Runs `task` on `pool` and returns its result's future.
template <typename F>
auto PostForResult(boost::asio::thread_pool& pool, F task) {
  return boost::asio::post(pool, std::packaged_task<std::invoke_result_t<F&>()>(std::move(task)));
}

}  // namespace idem::outbox
