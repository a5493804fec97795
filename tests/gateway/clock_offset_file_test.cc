// --unsafe-clock-offset-file's clock: the file's duration added to the base clock, re-read on
// Reload; a missing or malformed file is an error at Open and keeps the offset on Reload.
#include "gateway/clock_offset_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "servers/temp_dir.h"

namespace idem::gateway {
namespace {

using namespace std::chrono_literals;

TEST(ClockOffsetFileTest, AddsTheFilesOffsetAndFollowsIt) {
  servers::TempDir dir;
  const std::string path = dir.File("offset");
  std::ofstream(path) << "  90m\n";
  auto base = std::make_shared<ManualClock>();
  auto file = ClockOffsetFile::Open(path, base);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const auto clock = (*file)->clock();
  EXPECT_EQ(clock->Now(), base->Now() + 90min);
  base->Advance(1s);
  EXPECT_EQ(clock->Now(), base->Now() + 90min) << "the base clock keeps running";

  auto unchanged = (*file)->Reload();
  ASSERT_TRUE(unchanged.ok());
  EXPECT_FALSE(unchanged->has_value());

  std::ofstream(path) << "25h";
  auto changed = (*file)->Reload();
  ASSERT_TRUE(changed.ok());
  ASSERT_TRUE(changed->has_value());
  EXPECT_EQ(**changed, Duration(25h));
  EXPECT_EQ(clock->Now(), base->Now() + 25h);

  std::ofstream(path) << "tomorrow";
  auto malformed = (*file)->Reload();
  EXPECT_EQ(malformed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(clock->Now(), base->Now() + 25h) << "a bad file keeps the last offset";
  std::remove(path.c_str());
  EXPECT_FALSE((*file)->Reload().ok());
  EXPECT_EQ((*file)->offset(), Duration(25h));
}

TEST(ClockOffsetFileTest, OpenRefusesAMissingOrMalformedFile) {
  servers::TempDir dir;
  auto missing = ClockOffsetFile::Open(dir.File("none"), SystemClock());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find(dir.File("none")), std::string::npos);
  std::ofstream(dir.File("negative")) << "-1h";
  EXPECT_EQ(ClockOffsetFile::Open(dir.File("negative"), SystemClock()).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace idem::gateway
