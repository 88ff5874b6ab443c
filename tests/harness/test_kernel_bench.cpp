// `sax bench kernels` end to end (one process, no MPI): a single GEMM shape and a single attention
// with their FLOPs and bytes in the JSON, a sweep of a layout's layer slice with every op and its share of the
// device's peak, and bad input — sizes, ops, a layout that does not fit, a shape too big for the
// memory — refused with exit 2 and one line; the router's skew reaching the experts' GEMMs.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tests/support/run.hpp"

using sax::test::preset_path;
using sax::test::Result;
using sax::test::run_sax;
using sax::test::TempDir;

namespace {
int sax_lines(const std::string& err) { return static_cast<int>(std::count(err.begin(), err.end(), '\n')); }
}  // namespace

TEST(KernelBench, OneGemmShapeWithItsFlopsAndBytes) {
  TempDir t;
  Result r = run_sax("bench kernels --op gemm --m 64 --n 32 --k 16 -n 3 -w 1 --json " + t.file("g.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("gemm"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(sax::test::slurp(t.file("g.json")));
  ASSERT_EQ(j["results"].size(), 1u);
  const auto& g = j["results"][0];
  EXPECT_EQ(g["flops"], 2.0 * 64 * 32 * 16);
  EXPECT_EQ(g["executed_flops"], 2.0 * 64 * 32 * 16);  // the kernel's own count agrees
  EXPECT_EQ(g["bytes_read"], 4.0 * (64 * 16 + 16 * 32));
  EXPECT_EQ(g["bytes_written"], 4.0 * 64 * 32);
  EXPECT_GT(g["tflops"].get<double>(), 0);
  EXPECT_LE(g["min_ms"].get<double>(), g["time_ms"].get<double>());
  EXPECT_EQ(j["threads"], 1);
  // The backward: input and weight gradients, twice the FLOPs.
  r = run_sax("bench kernels --op gemm --m 64 --n 32 --k 16 --phase backward -n 1 --json " + t.file("b.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(sax::test::slurp(t.file("b.json")))["results"][0]["flops"], 4.0 * 64 * 32 * 16);
}

TEST(KernelBench, SweepsEveryOpOfALayoutsLayerSlice) {
  TempDir t;
  Result r = run_sax("bench kernels --cluster " + preset_path("clusters/local-2bld.json") + " --model " +
                     preset_path("models/moe-tiny.json") + " --layout " + preset_path("layouts/local-ep2-dp4.json") +
                     " -n 1 -w 0 --json " + t.file("s.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(sax::test::slurp(t.file("s.json")));
  std::set<std::string> names;
  for (const auto& row : j["results"]) {
    names.insert(row["op"]);
    EXPECT_GT(row["time_ms"].get<double>(), 0) << row.dump();
    EXPECT_GT(row["bytes_read"].get<double>(), 0) << row.dump();
    ASSERT_FALSE(row["peak_share"].is_null()) << row.dump();  // the cluster gives the peak
    EXPECT_TRUE(row["bound"] == "flops" || row["bound"] == "bytes") << row.dump();
  }
  for (const char* op :
       {"embedding", "input_norm", "qkv_proj", "rope", "attention_scores", "attention_softmax", "attention_values",
        "out_proj", "router", "router_topk", "permute", "experts_fc1", "expert_activation", "experts_fc2", "unpermute",
        "final_norm", "logits", "cross_entropy", "optimizer_step"})
    EXPECT_EQ(names.count(op), 1u) << op;
}

TEST(KernelBench, OneCausalAttentionWithGroupedQueryHeads) {
  TempDir t;
  Result r = run_sax(
      "bench kernels --op attention --m 64 --n 96 --k 32 --heads 4 --kv-heads 2 --phase backward -n 2 "
      "-w 0 --json " +
      t.file("a.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(sax::test::slurp(t.file("a.json")));
  const auto& a = j["results"][0];
  EXPECT_EQ(a["op"], "attention");
  EXPECT_EQ(a["flops"], 8.0 * 64 * 96 * 32 * 4);  // Megatron's count: backward twice the forward's 4·sq·sk·d
  EXPECT_EQ(a["heads"], nlohmann::json::array({4.0, 2.0}));
  // Reads Q, O, dO (64·4·32 each), K, V (96·2·32 each), the log-sum-exp; writes dQ, dK, dV.
  EXPECT_EQ(a["bytes_read"], 4.0 * (3 * 64 * 4 * 32 + 2 * 96 * 2 * 32 + 4 * 64));
  // A causal forward skips the key blocks past each query block: of 4×4 blocks of 64, 10 run.
  r = run_sax("bench kernels --op attention --m 256 --n 256 --k 32 -n 1 -w 0 --json " + t.file("f.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto f = nlohmann::json::parse(sax::test::slurp(t.file("f.json")))["results"][0];
  EXPECT_EQ(f["flops"], 4.0 * 256 * 256 * 32);
  EXPECT_EQ(f["executed_flops"], 0.625 * 4.0 * 256 * 256 * 32);
}

// The router's skew reaches the experts' grouped GEMMs: rows per local expert in the JSON, and
// a strong skew sends more rows to this rank (EP rank 0 holds the low-numbered experts).
TEST(KernelBench, RouterSkewMakesTheExpertRowsUneven) {
  TempDir t;
  const std::string sweep = "bench kernels --cluster " + preset_path("clusters/local-2bld.json") + " --model " +
                            preset_path("models/moe-tiny.json") + " --layout " +
                            preset_path("layouts/local-ep2-dp4.json") + " -n 1 -w 0 --json ";
  std::int64_t total[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    Result r = run_sax(sweep + t.file("s.json") + (i ? " --router-skew 8" : ""));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(sax::test::slurp(t.file("s.json")));
    EXPECT_EQ(j["router_skew"], i ? 8.0 : 0.0);
    for (const auto& row : j["results"])
      if (row["op"] == "experts_fc1" && row["phase"] == "forward") {
        ASSERT_EQ(row["expert_rows"].size(), 2u) << row.dump();  // 4 experts over EP 2
        for (const auto& n : row["expert_rows"]) total[i] += n.get<std::int64_t>();
      }
  }
  EXPECT_GT(total[0], 0);
  EXPECT_GT(total[1], 1.5 * static_cast<double>(total[0]));
}

struct Bad {
  const char* name;
  std::string args, says;
};
void PrintTo(const Bad& b, std::ostream* os) { *os << b.name; }
class KernelBenchBad : public ::testing::TestWithParam<Bad> {};

TEST_P(KernelBenchBad, ExitsTwoWithOneLine) {
  Result r = run_sax("bench kernels " + GetParam().args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(sax_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(GetParam().says), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;  // nothing allocated or run
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KernelBenchBad,
    ::testing::Values(
        Bad{"ZeroSize", "--op gemm --m 0 --n 4 --k 4", "--m: expected an integer from 1"},
        Bad{"NegativeSize", "--op gemm --m 4 --n -4 --k 4", "--n: expected an integer from 1"},
        Bad{"NotANumber", "--op gemm --m 4 --n 4 --k four", "--k: expected an integer"},
        Bad{"BeyondInt", "--op gemm --m 4 --n 4 --k 3000000000", "--k: expected an integer from 1 to 2147483647"},
        Bad{"UnknownOp", "--op conv --m 4 --n 4 --k 4", "--op: expected gemm or attention"},
        Bad{"FewerKeysThanQueries", "--op attention --m 8 --n 4 --k 4", "--n (keys) must be at least --m"},
        Bad{"KvHeadsNotDividing", "--op attention --m 4 --n 4 --k 4 --heads 4 --kv-heads 3", "--kv-heads must divide"},
        Bad{"HeadsOnAGemm", "--op gemm --m 4 --n 4 --k 4 --heads 2", "--heads and --kv-heads go with --op attention"},
        Bad{"AttentionWeightPhase", "--op attention --m 4 --n 4 --k 4 --phase backward_weight",
            "--phase: expected forward, backward, got"},
        Bad{"UnknownBackend", "--op gemm --m 4 --n 4 --k 4 --backend tpu", "--backend: expected cpu or cuda"},
        Bad{"NegativeSkew", "--op gemm --m 4 --n 4 --k 4 --router-skew=-1", "--router-skew: expected a number"},
        Bad{"UnknownPhase", "--op gemm --m 4 --n 4 --k 4 --phase sideways", "--phase: expected forward"},
        Bad{"TooBigForMemory", "--op gemm --m 2000000000 --n 2000000000 --k 1", "GiB are free on the cpu device"},
        Bad{"NothingToRun", "", "--op gemm with --m --n --k, or --cluster, --model and --layout"},
        Bad{"LayoutNotFittingModel",
            "--cluster " + preset_path("clusters/local-2bld.json") + " --model " + preset_path("models/gpt-tiny.json") +
                " --layout " + preset_path("layouts/local-ep2-dp4.json"),
            "/expert_model_parallel_size"},
        Bad{"RankBeyondWorld",
            "--cluster " + preset_path("clusters/local-2bld.json") + " --model " + preset_path("models/gpt-tiny.json") +
                " --layout " + preset_path("layouts/local-tp2-pp2.json") + " --rank 4",
            "--rank: expected an integer from 0 to 3"}),
    [](const auto& info) { return std::string(info.param.name); });
