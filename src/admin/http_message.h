// The HTTP messages the daemons' listeners read and answer (every admin listener, and the
// gateway's client listener), and the allocator their header fields take memory from.
//
// Beast allocates one block per header field. The gateway's listener gives each message a
// FieldsAllocator on a memory resource its connection owns (an arena, emptied before each
// request: std::pmr::monotonic_buffer_resource), so header fields do not reach the heap.
// Everywhere else a message is built with the default allocator, on the heap.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstddef>
#include <memory_resource>
#include <type_traits>

namespace idem::admin {

// An allocator on a std::pmr::memory_resource (default: the heap, new_delete_resource()).
// Unlike std::pmr::polymorphic_allocator, it moves with its container: a message moved into
// another takes its fields and their resource along instead of copying them. A copy of a
// message is made on the heap, so a copy may outlive the connection whose resource the
// original used.
// REQUIRES: a message holding a resource's allocator is destroyed before the resource is (or,
// for the gateway's arena, before it is emptied: keep messages within the request that made
// them), and is used by one thread at a time (the resource is not synchronized).
template <class T>
class FieldsAllocator {
 public:
  using value_type = T;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using propagate_on_container_copy_assignment = std::false_type;
  using is_always_equal = std::false_type;

  FieldsAllocator() noexcept = default;
  explicit FieldsAllocator(std::pmr::memory_resource* resource) noexcept : resource_(resource) {}
  template <class U>
  FieldsAllocator(const FieldsAllocator<U>& other) noexcept  // NOLINT: rebinding converts
      : resource_(other.resource()) {}

  T* allocate(std::size_t n) {
    return static_cast<T*>(resource_->allocate(n * sizeof(T), alignof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    resource_->deallocate(p, n * sizeof(T), alignof(T));
  }
  FieldsAllocator select_on_container_copy_construction() const noexcept { return {}; }

  std::pmr::memory_resource* resource() const noexcept { return resource_; }

  template <class U>
  bool operator==(const FieldsAllocator<U>& other) const noexcept {
    return resource_ == other.resource();
  }

 private:
  std::pmr::memory_resource* resource_ = std::pmr::new_delete_resource();
};

using Fields = boost::beast::http::basic_fields<FieldsAllocator<char>>;
using Request = boost::beast::http::request<boost::beast::http::string_body, Fields>;
using Response = boost::beast::http::response<boost::beast::http::string_body, Fields>;

}  // namespace idem::admin
