// What one recorded event costs the executor: StepTracer::span (a span of the
// executor's thread) and StepTracer::lifetime (a message on its dimension's lanes), against
// profiles::now_ns (the clock reading every timed span pays with or without --trace). Multiplied
// by the events a step records (`sax run --json`: trace.events_max / steps) it bounds what
// --trace adds to a step more tightly than paired runs can on a loaded host
// (scripts/trace_overhead.py measures those).
#include <benchmark/benchmark.h>

#include "harness/internal/tracer.hpp"
#include "profiles/host_recorder.hpp"

namespace {

constexpr std::size_t kCapacity = 1 << 22;

void BM_NowNs(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(sax::profiles::now_ns());
}
BENCHMARK(BM_NowNs);

void BM_Span(benchmark::State& state) {
  sax::harness::StepTracer tracer(0, kCapacity);
  std::int64_t t = 0;
  for (auto _ : state) {
    tracer.span(sax::profiles::Category::compute, "forward attn_qkv (micro-batch 0)", t, t + 5, 0, 7);
    t += 10;
    if (tracer.recorder().size() == kCapacity) {  // keep recording, never dropping
      state.PauseTiming();
      tracer.clear();
      state.ResumeTiming();
    }
  }
}
BENCHMARK(BM_Span);

void BM_Lifetime(benchmark::State& state) {
  sax::harness::StepTracer tracer(0, kCapacity);
  std::int64_t t = 0;
  for (auto _ : state) {
    tracer.lifetime(sax::Dim::dp, "dp.reduce_scatter", t, t + 25, 1 << 20);  // several in flight at once
    t += 10;
    if (tracer.recorder().size() == kCapacity) {
      state.PauseTiming();
      tracer.clear();
      state.ResumeTiming();
    }
  }
}
BENCHMARK(BM_Lifetime);

}  // namespace

BENCHMARK_MAIN();
