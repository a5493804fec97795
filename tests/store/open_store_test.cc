#include <gtest/gtest.h>

#include "idem/store.h"
#include "util/temp_dir.h"

namespace idem {
namespace {

TEST(OpenStoreTest, OpensMemoryAndSqlite) {
  testing::TempDir dir;
  auto memory = OpenStore("memory");
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  EXPECT_NE((*memory)->Describe().find("memory"), std::string::npos);

  auto sqlite = OpenStore("sqlite:" + dir.File("a.db") + "?durability=full&busy_timeout_ms=250");
  ASSERT_TRUE(sqlite.ok()) << sqlite.status().ToString();
  EXPECT_NE((*sqlite)->Describe().find("durability=full"), std::string::npos);
  EXPECT_NE((*sqlite)->Describe().find(dir.File("a.db")), std::string::npos);
}

TEST(OpenStoreTest, MigrateCreatesTheSqliteSchemaAndSaysWhatItFound) {
  testing::TempDir dir;
  const std::string url = "sqlite:" + dir.File("m.db");
  auto first = Migrate(url);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_NE(first->find(dir.File("m.db")), std::string::npos) << *first;
  EXPECT_NE(first->find("schema is current"), std::string::npos) << *first;
  auto store = OpenStore(url);  // the file now holds the schema
  ASSERT_TRUE(store.ok()) << store.status().ToString();

  auto bad = Migrate("nosuch:x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  auto unreachable = Migrate("postgresql://nobody@127.0.0.1:1/db?connect_timeout=1");
  ASSERT_FALSE(unreachable.ok());
  EXPECT_EQ(unreachable.status().code(), StatusCode::kUnavailable)
      << unreachable.status().ToString();
}

TEST(OpenStoreTest, BadUrlsAreClearInvalidArguments) {
  for (const char* url : {"", "redis", "nosuch:x", "memory:extra", "memory?x=1"}) {
    auto store = OpenStore(url);
    ASSERT_FALSE(store.ok()) << url;
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << url;
  }
  auto bad_option = OpenStore("sqlite:x.db?durability=sometimes");
  ASSERT_FALSE(bad_option.ok());
  EXPECT_NE(bad_option.status().message().find("off, normal or full"), std::string::npos);
  auto unknown = OpenStore("sqlite:x.db?color=blue");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown sqlite store option 'color'"),
            std::string::npos);
  for (const char* bad : {"sqlite:x.db?busy_timeout_ms=soon", "sqlite:x.db?busy_timeout_ms=-1",
                          "sqlite:x.db?busy_timeout_ms=10s"}) {
    auto r = OpenStore(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("busy_timeout_ms must be"), std::string::npos) << bad;
  }
  auto no_value = OpenStore("sqlite:x.db?durability");
  ASSERT_FALSE(no_value.ok());
  EXPECT_EQ(no_value.status().code(), StatusCode::kInvalidArgument);
}

// The tiered store is Redis in front of PostgreSQL, and nothing else: other pairings are
// refused before any server is contacted, with the password left out of the message.
TEST(OpenStoreTest, TieredStoreNeedsRedisInFrontAndPostgresBehind) {
  StoreOptions options;
  options.durable_store = "postgresql://idem:secret@127.0.0.1:1/db";
  auto not_redis = OpenStore("sqlite:x.db", options);
  ASSERT_FALSE(not_redis.ok());
  EXPECT_EQ(not_redis.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(not_redis.status().message().find("must be a redis:// URL"), std::string::npos);
  options.durable_store = "sqlite:y.db";
  auto not_postgres = OpenStore("redis://:secret@127.0.0.1:1", options);
  ASSERT_FALSE(not_postgres.ok());
  EXPECT_EQ(not_postgres.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(not_postgres.status().message().find("must be a postgresql:// URL"),
            std::string::npos);
  EXPECT_EQ(not_postgres.status().message().find("secret"), std::string::npos);
}

// Settings only one store reads are options of its URL; bad values fail at open, naming the
// option and the URL, and never reach the store.
TEST(OpenStoreTest, StoreSpecificOptionsAreUrlOptions) {
  testing::TempDir dir;
  auto memory = OpenStore("memory?shards=4");
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  EXPECT_EQ((*memory)->Describe(), "memory (4 shards)");
  auto rounded = OpenStore("memory?shards=5");
  ASSERT_TRUE(rounded.ok()) << rounded.status().ToString();
  EXPECT_EQ((*rounded)->Describe(), "memory (8 shards)");
  EXPECT_EQ((*OpenStore("memory"))->Describe(), "memory (64 shards)");

  auto sqlite = OpenStore("sqlite:" + dir.File("o.db") +
                          "?sweep_batch=1&durability=off&busy_timeout_ms=0"
                          "&replay_cache_entries=0&replay_cache_mb=1");
  ASSERT_TRUE(sqlite.ok()) << sqlite.status().ToString();
  EXPECT_NE((*sqlite)->Describe().find("durability=off"), std::string::npos);

  struct Bad {
    const char* url;
    const char* message;
  };
  for (const Bad& bad : std::initializer_list<Bad>{
           {"memory?shards=0", "shards must be"},
           {"memory?shards=65537", "shards must be"},
           {"memory?shards=four", "shards must be"},
           {"memory?shards=", "shards must be"},
           {"memory?shards", "no value"},
           {"memory?durability=full", "unknown memory store option 'durability'"},
           {"sqlite:x.db?sweep_batch=0", "sweep_batch must be"},
           {"sqlite:x.db?sweep_batch=-5", "sweep_batch must be"},
           {"sqlite:x.db?sweep_batch=99999999999999999999", "sweep_batch must be"},
           {"sqlite:x.db?busy_timeout_ms=3600001", "busy_timeout_ms must be"},
           {"sqlite:x.db?replay_cache_entries=-1", "replay_cache_entries must be"},
           {"sqlite:x.db?replay_cache_entries=10000001", "replay_cache_entries must be"},
           {"sqlite:x.db?replay_cache_mb=0", "replay_cache_mb must be"},
           {"sqlite:x.db?shards=4", "unknown sqlite store option 'shards'"},
       }) {
    auto r = OpenStore(bad.url);
    ASSERT_FALSE(r.ok()) << bad.url;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad.url;
    EXPECT_NE(r.status().message().find(bad.message), std::string::npos)
        << bad.url << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find(bad.url), std::string::npos)
        << "the error names the URL: " << r.status().ToString();
  }
}

}  // namespace
}  // namespace idem
