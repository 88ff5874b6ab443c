// `sax calibrate --trace`: a PyTorch profiler (Kineto) trace read back. A trace made with a known
// device (kernels the datasheet's roofline times a known factor) gives that factor back; a real
// A100 trace (HolisticTraceAnalysis' test data, tests/data/kineto) is classed and fitted; a trace
// that is not one, is cut short, has no shapes, is of another device or is too large is refused
// with one line naming the file and the field, and nothing is written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "calibration/trace_fit.hpp"
#include "spec/calibration.hpp"
#include "tests/support/run.hpp"
#include "workload/device_time.hpp"
#include "workload/layer_ops.hpp"

using nlohmann::json;
using sax::test::TempDir;

namespace {

std::string kineto(const std::string& name) { return std::string(SAX_SOURCE_DIR) + "/tests/data/kineto/" + name; }
const std::string kA100 = sax::test::preset_path("clusters/a100-3bld.json");
const std::string kH100 = sax::test::preset_path("clusters/h100-3bld.json");

// A trace of one bf16 GEMM (4096³) run at `gemm` of the datasheet's speed, one fp32 add of 16 Mi
// elements at `memory` of it, and an all-reduce whose second half ran beside the GEMM.
json made_trace(const sax::Cluster& c, double gemm, double memory) {
  using namespace sax::workload;
  const DeviceSpeed bf16 = DeviceSpeed::of(c.device, sax::Backend::cuda, sax::DType::bf16);
  const DeviceSpeed fp32 = DeviceSpeed::of(c.device, sax::Backend::cuda, sax::DType::fp32);
  const double n = 4096, flops = 2 * n * n * n;
  const double q = quantization(ComputeKind::gemm, n, n, n, 1, Part::forward, bf16.sm_count);
  const double gemm_us = roofline_time(bf16, ComputeKind::gemm, flops, flops, 2 * 3 * n * n, q) / gemm * 1e6;
  const double e = 16.0 * (1 << 20);
  const double add_us = roofline_time(fp32, ComputeKind::memory, 0, 0, 4 * 3 * e, 1) / memory * 1e6;
  auto op = [](const char* name, double ts, json dims, json types) {
    return json{
        {"ph", "X"}, {"cat", "cpu_op"}, {"name", name}, {"pid", 1},
        {"tid", 1},  {"ts", ts},        {"dur", 50},    {"args", {{"Input Dims", dims}, {"Input type", types}}}};
  };
  auto launch = [](double ts, int corr) {
    return json{
        {"ph", "X"}, {"cat", "cuda_runtime"},          {"name", "cudaLaunchKernel"}, {"pid", 1}, {"tid", 1}, {"ts", ts},
        {"dur", 5},  {"args", {{"correlation", corr}}}};
  };
  auto kernel = [](const char* name, double ts, double dur, int corr) {
    return json{{"ph", "X"}, {"cat", "kernel"}, {"name", name}, {"pid", 0},
                {"tid", 7},  {"ts", ts},        {"dur", dur},   {"args", {{"correlation", corr}}}};
  };
  json ev = json::array();
  ev.push_back(op("aten::linear", 0, json::array({{4096, 4096}, {4096, 4096}}), {"c10::BFloat16", "c10::BFloat16"}));
  ev.back()["dur"] = 200;  // the mm inside it is the innermost
  ev.push_back(op("aten::mm", 10, json::array({{4096, 4096}, {4096, 4096}}), {"c10::BFloat16", "c10::BFloat16"}));
  // A copy that starts with the mm and ends before its GEMM's launch: its own kernel is its.
  ev.push_back(op("aten::copy_", 10, json::array({{1 << 24}, {1 << 24}}), {"float", "float"}));
  ev.back()["dur"] = 5;
  ev.push_back(launch(12, 4));
  ev.push_back(launch(20, 1));
  ev.push_back(op("aten::add", 100, json::array({{1 << 24}, {1 << 24}, json::array()}), {"float", "float", "Scalar"}));
  ev.push_back(launch(110, 2));
  ev.push_back(launch(300, 3));  // the all-reduce's, launched by no shaped op
  ev.push_back(kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 1000, gemm_us, 1));
  ev.push_back(kernel("void at::native::vectorized_elementwise_kernel<4>", 1000 + gemm_us, add_us, 2));
  ev.push_back(kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 1000 + gemm_us / 2, gemm_us / 2, 3));
  ev.push_back(kernel("void at::native::elementwise_kernel<copy>", 0, add_us, 4));  // 3 x 16 Mi floats too
  return {{"schemaVersion", 1}, {"deviceProperties", {{{"name", "NVIDIA H100 80GB HBM3"}}}}, {"traceEvents", ev}};
}

}  // namespace

TEST(CalibrateTrace, AMadeTraceGivesBackItsDevicesFactors) {
  TempDir t;
  const sax::Cluster h100 = sax::load_cluster(kH100);
  const auto s = sax::calibration::read_trace(t.write("t.json", made_trace(h100, 0.8, 0.9)), h100);
  EXPECT_EQ(s.generation, sax::GpuGeneration::h100);
  ASSERT_EQ(s.gemm.size(), 1u) << "the GEMM's kernel tied to the mm, not to the copy inside it";
  ASSERT_EQ(s.memory.size(), 2u) << "the add's kernel and the copy's";
  EXPECT_EQ(s.classes.at("gemm").kernels, 1);
  EXPECT_EQ(s.nccl.at("all_reduce").kernels, 1);
  // The all-reduce ran wholly beside the GEMM's second half: all of its time overlapped.
  EXPECT_NEAR(s.nccl_overlap_s, s.classes.at("nccl").seconds, 1e-9);
  const auto fit = sax::calibration::fit_traces({s});
  EXPECT_NEAR(fit.device.gemm_scale.value, 0.8, 1e-6);
  EXPECT_NEAR(fit.device.memory_scale.value, 0.9, 1e-6);
  EXPECT_DOUBLE_EQ(fit.device.attention_scale.value, 1.0) << "no attention in the trace: the datasheet's";
  EXPECT_DOUBLE_EQ(fit.device.attention_scale.low, 0.3) << "and undetermined";
}

TEST(CalibrateTrace, ARealA100TraceIsClassedAndFitted) {
  const sax::Cluster a100 = sax::load_cluster(kA100);
  const auto s = sax::calibration::read_trace(kineto("a100-sxm4-80gb-rank0.json.gz"), a100);
  EXPECT_EQ(s.device, "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(s.generation, sax::GpuGeneration::a100);
  double shares = 0;
  for (const auto& [name, c] : s.classes) shares += c.seconds;
  EXPECT_NEAR(shares, s.kernel_s, 1e-9);
  EXPECT_GT(s.classes.at("gemm").kernels, 100);
  EXPECT_GT(s.nccl.at("send_recv").kernels, 10);
  EXPECT_GE(s.gemm.size(), 10u) << "GEMMs tied to their addmm/mm through the launch inside them";
  EXPECT_GE(s.memory.size(), 100u);
  const auto fit = sax::calibration::fit_traces({s});
  ASSERT_TRUE(fit.gemm_fitted);
  EXPECT_LE(fit.device.gemm_scale.low, fit.device.gemm_scale.value);
  EXPECT_GE(fit.device.gemm_scale.high, fit.device.gemm_scale.value);
}

TEST(CalibrateTrace, TheCommandWritesACalibrationAndPredictUsesIt) {
  TempDir t;
  const auto r =
      sax::test::run_shell(std::string(SAX_BINARY) + " calibrate --trace " + kineto("a100-sxm4-80gb-rank0.json.gz") +
                           " --cluster " + kA100 + " --out " + t.file("k.json"));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("nccl send_recv"), std::string::npos) << r.out;
  const sax::Calibration k = sax::load_calibration(t.file("k.json"));
  ASSERT_EQ(k.devices.count(sax::GpuGeneration::a100), 1u);
  EXPECT_EQ(k.devices.at(sax::GpuGeneration::a100).held_out, 0) << "one trace: nothing held out, no figure";
  const auto p = sax::test::run_shell(
      std::string(SAX_BINARY) + " predict --cluster " + sax::test::preset_path("clusters/published/selene-32.json") +
      " --model " + sax::test::preset_path("models/published/narayanan2021-gpt-1p7b.json") + " --layout " +
      sax::test::preset_path("layouts/published/narayanan2021-gpt-1p7b.json") + " --calibration " + t.file("k.json"));
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("a100 compute measured"), std::string::npos) << p.out;
}

TEST(CalibrateTrace, ABadTraceIsRefusedWithOneLineAndNothingIsWritten) {
  TempDir t;
  // Cut short: the first half of a trace's text.
  std::string text = json{{"deviceProperties", {{{"name", "NVIDIA A100-SXM4-80GB"}}}},
                          {"traceEvents", made_trace(sax::load_cluster(kH100), 1, 1)["traceEvents"]}}
                         .dump();
  const std::string cut = t.write_text("cut.json", text.substr(0, text.size() / 2));
  const std::string big = t.file("big.json");
  { std::ofstream(big) << "{"; }
  std::filesystem::resize_file(big, (std::size_t{1} << 30) + 1);  // sparse: no disk taken
  struct Case {
    std::string what, file, field;
  };
  const Case cases[] = {
      {"another device", kineto("mi250-minitoy.json.gz"), "/deviceProperties/0/name"},
      {"no shapes to fit", kineto("a100-alexnet.json.gz"), "record_shapes"},
      {"cut short", cut, "cut.json"},
      {"not a trace", t.write("x.json", json{{"runs", json::array()}}), "/traceEvents"},
      {"too large", big, "at most 1024 MiB"},
      {"no such file", t.file("none.json"), "none.json"},
  };
  for (const Case& c : cases) {
    const auto r = sax::test::run_shell(std::string(SAX_BINARY) + " calibrate --trace " + c.file + " --cluster " +
                                        kA100 + " --out " + t.file("k.json"));
    EXPECT_EQ(r.code, 2) << c.what << ": " << r.err;
    EXPECT_NE(r.err.find(c.field), std::string::npos) << c.what << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.what << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(t.file("k.json"))) << c.what;
  }
}
