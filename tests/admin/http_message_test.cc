// The messages' FieldsAllocator: header fields on a connection's memory resource move with
// their message, and a copy lives on the heap, so it may outlive the connection.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory_resource>
#include <utility>

#include "admin/http_message.h"

namespace idem::admin {
namespace {

namespace http = boost::beast::http;

// Counts what it hands out; everything comes from the heap underneath.
class CountingResource : public std::pmr::memory_resource {
 public:
  size_t outstanding() const { return outstanding_; }
  size_t allocations() const { return allocations_; }

 private:
  void* do_allocate(size_t bytes, size_t align) override {
    ++allocations_;
    ++outstanding_;
    return std::pmr::new_delete_resource()->allocate(bytes, align);
  }
  void do_deallocate(void* p, size_t bytes, size_t align) override {
    --outstanding_;
    std::pmr::new_delete_resource()->deallocate(p, bytes, align);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }
  size_t outstanding_ = 0;
  size_t allocations_ = 0;
};

Request RequestOn(std::pmr::memory_resource* resource) {
  Request request(std::piecewise_construct, std::make_tuple(),
                  std::make_tuple(FieldsAllocator<char>(resource)));
  request.method(http::verb::post);
  request.target("/v1/payments");
  request.set("Idempotency-Key", "k1");
  request.set(http::field::content_type, "application/json");
  return request;
}

TEST(FieldsAllocatorTest, FieldsTakeMemoryFromTheGivenResourceAndGiveItBack) {
  CountingResource resource;
  {
    Request request = RequestOn(&resource);
    EXPECT_GT(resource.allocations(), 0u);
    EXPECT_GT(resource.outstanding(), 0u);
    EXPECT_EQ(request.get_allocator().resource(), &resource);
  }
  EXPECT_EQ(resource.outstanding(), 0u);
}

TEST(FieldsAllocatorTest, AMoveAssignedMessageTakesTheFieldsAndTheirResourceWithoutCopying) {
  CountingResource resource;
  Request request = RequestOn(&resource);
  const size_t allocated = resource.allocations();
  Request target;  // on the heap
  target = std::move(request);
  EXPECT_EQ(resource.allocations(), allocated);  // nothing copied
  EXPECT_EQ(target.get_allocator().resource(), &resource);
  EXPECT_EQ(target["Idempotency-Key"], "k1");
  EXPECT_EQ(target.target(), "/v1/payments");
}

TEST(FieldsAllocatorTest, ACopyLivesOnTheHeapAndOutlivesTheResource) {
  Request copy;
  {
    CountingResource resource;
    Request request = RequestOn(&resource);
    copy = request;  // copy assignment keeps the target's (heap) allocator
    Request constructed(request);
    EXPECT_EQ(constructed.get_allocator().resource(), std::pmr::new_delete_resource());
    EXPECT_EQ(copy.get_allocator().resource(), std::pmr::new_delete_resource());
  }
  EXPECT_EQ(copy["Idempotency-Key"], "k1");
  EXPECT_EQ(copy.target(), "/v1/payments");
}

TEST(FieldsAllocatorTest, ADefaultMessageUsesTheHeap) {
  Response response;
  EXPECT_EQ(response.get_allocator().resource(), std::pmr::new_delete_resource());
}

}  // namespace
}  // namespace idem::admin
