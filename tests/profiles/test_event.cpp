#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "profiles/event.hpp"

using namespace sax::profiles;

TEST(ProfilesEvent, ToStringNamesEveryEnumValue) {
  EXPECT_STREQ(to_string(LaneKind::host_thread), "host_thread");
  EXPECT_STREQ(to_string(LaneKind::device_stream), "device_stream");
  const Category all[] = {Category::compute, Category::communication, Category::memcpy,
                          Category::memset,  Category::runtime,       Category::range,
                          Category::step,    Category::other,         Category::idle};
  std::set<std::string> names;
  for (Category c : all) names.insert(to_string(c));
  EXPECT_EQ(names.size(), std::size(all));
  EXPECT_EQ(names.count("unknown"), 0u);
  EXPECT_STREQ(to_string(Category::communication), "communication");
}

TEST(ProfilesNameTable, OnePointerPerNameThatOutlivesTheCallersString) {
  NameTable table;
  const char* a = nullptr;
  {
    std::string built = std::string("dp.") + "reduce_scatter";
    a = table.intern(built);
  }
  const char* again = table.intern(std::string("dp.reduce_scatter"));
  const char* other = table.intern("tp.all_reduce");
  EXPECT_EQ(a, again);
  EXPECT_NE(a, other);
  EXPECT_STREQ(a, "dp.reduce_scatter");
  // Many more names force rehashing; the first pointer must still hold its characters.
  for (int i = 0; i < 2000; ++i) table.intern("layer." + std::to_string(i));
  EXPECT_STREQ(a, "dp.reduce_scatter");
  EXPECT_EQ(table.intern("dp.reduce_scatter"), a);
  EXPECT_EQ(table.size(), 2002u);
}

TEST(ProfilesNameTable, ThreadsInterningTheSameNamesGetTheSamePointers) {
  NameTable table;
  std::vector<std::vector<const char*>> seen(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) seen[t].push_back(table.intern("op." + std::to_string(i)));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(table.size(), 200u);
  for (int t = 1; t < 4; ++t) EXPECT_EQ(seen[t], seen[0]);
}
