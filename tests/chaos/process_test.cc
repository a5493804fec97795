// The harness's process launcher, which `idem chaos` and the fixtures start every server with.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "servers/process.h"
#include "servers/temp_dir.h"
#include "util/wait_for.h"

namespace idem::servers {
namespace {

using namespace std::chrono_literals;

// A started server sees its standard streams and nothing else of the parent: descriptors the
// parent opened without O_CLOEXEC (client libraries do) would count against its limit, and a
// PostgreSQL started by a long chaos run refused to start for want of them.
TEST(ProcessTest, AStartedProcessInheritsNoDescriptorOfItsParent) {
  const int inheritable = open("/dev/null", O_RDONLY);  // no O_CLOEXEC
  ASSERT_GE(inheritable, 3);
  TempDir dir;
  Process ls({"/bin/ls", "/proc/self/fd"}, dir.File("ls.log"));
  EXPECT_TRUE(testing::WaitFor([&] { return !ls.Running(); }, 2s, 20ms));
  close(inheritable);
  ASSERT_FALSE(ls.Running());
  // 0, 1 and 2, and the directory ls reads.
  EXPECT_EQ(ls.Output(), "0\n1\n2\n3\n");
}

}  // namespace
}  // namespace idem::servers
