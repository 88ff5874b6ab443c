// The host recorder's promise: no allocation on the hot path. Checked by replacing the global
// operator new of this test executable with one that counts.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "profiles/host_recorder.hpp"

namespace {
std::atomic<std::uint64_t> g_allocations{0};

void* counted_alloc(std::size_t size, std::size_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (size == 0) size = 1;
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (size + align - 1) / align * align)
                                              : std::malloc(size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

// operator new[] and the nothrow forms forward to these in libstdc++.
void* operator new(std::size_t size) { return counted_alloc(size, 0); }
void* operator new(std::size_t size, std::align_val_t align) {
  return counted_alloc(size, static_cast<std::size_t>(align));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace sax::profiles;

TEST(HostRecorderHotPath, CountingAllocatorSeesAllocations) {
  // Without this the test below could pass with a counter that never counts.
  const std::uint64_t before = g_allocations.load();
  std::vector<int> v;
  v.reserve(1000);
  asm volatile("" : : "r"(v.data()) : "memory");
  EXPECT_GT(g_allocations.load(), before);
}

TEST(HostRecorderHotPath, TenThousandRangesAllocateNothing) {
  constexpr int kPairs = 10000;
  HostRecorder recorder(0, kPairs + 100);  // allocates here, once
  static const char* const kName = "tp.all_reduce";
  (void)current_thread_id();  // the first call on a thread makes a syscall; it allocates nothing either

  const std::uint64_t before = g_allocations.load();
  for (int i = 0; i < kPairs; ++i) {
    auto r = recorder.begin(kName, Category::communication, static_cast<std::uint64_t>(i));
    recorder.end(r);
  }
  { ScopedRange step(recorder, "step", Category::step); }
  Event e;
  e.name = kName;
  for (int i = 0; i < 99; ++i) recorder.record(e);
  // Full now: dropping allocates nothing either.
  for (int i = 0; i < 100; ++i) recorder.end(recorder.begin(kName));
  const std::uint64_t after = g_allocations.load();

  EXPECT_EQ(after, before);
  EXPECT_EQ(recorder.size(), static_cast<std::size_t>(kPairs + 100));
  EXPECT_EQ(recorder.dropped(), 100u);
}
