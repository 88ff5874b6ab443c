// --lengths: every form parses, every malformed one is refused naming the flag (and a histogram
// file's field), and the draws hold what the spec says: within the sequence, the same for the
// same seed and step, packed documents filling the budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "spec/error.hpp"
#include "spec/lengths.hpp"

using namespace sax;

namespace {

std::string refusal(const std::string& text) {
  try {
    parse_lengths(text, "--lengths");
  } catch (const UsageError& e) {
    return e.what();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::vector<double> tokens(const std::vector<SequenceShare>& s, double seq) {
  std::vector<double> out;
  for (const auto& q : s) out.push_back(std::round(q.tokens * seq));
  return out;
}

}  // namespace

TEST(Lengths, EveryFormParses) {
  EXPECT_FALSE(parse_lengths("fixed").uneven());
  const LengthSpec u = parse_lengths("uniform:min=10,max=20,seed=7");
  EXPECT_EQ(u.kind, LengthSpec::Kind::uniform);
  EXPECT_EQ(u.min, 10);
  EXPECT_EQ(u.max, 20);
  EXPECT_EQ(u.seed, 7u);
  const LengthSpec l = parse_lengths("lognormal:median=2048,sigma=1.0,max=8192,pack=docs");
  EXPECT_EQ(l.kind, LengthSpec::Kind::lognormal);
  EXPECT_EQ(l.pack, LengthSpec::Pack::docs);
  EXPECT_EQ(l.median, 2048);
  EXPECT_EQ(l.max, 8192);
  EXPECT_EQ(l.text, "lognormal:median=2048,sigma=1.0,max=8192,pack=docs");
}

TEST(Lengths, MalformedSpecsNameWhatIsWrong) {
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"gamma:k=2", "unknown distribution \"gamma\""},
           {"uniform:min=10", "uniform needs max"},
           {"uniform:min=30,max=20", "max is below its min"},
           {"lognormal:median=0,sigma=1", "median must be a number from 1"},
           {"lognormal:median=64,sigma=x", "sigma must be a number"},
           {"lognormal:median=64,sigma=1,sigma=2", "sigma given twice"},
           {"lognormal:median=64,sigma=1,mean=3", "unknown key mean"},
           {"uniform:min=1,max=2,pack=yes", "pack must be none or docs"},
           {"uniform:min=1,max=2,", "\"\" is not key=value"},
           {"histogram:seed=3", "histogram needs file=F"}}) {
    const std::string e = refusal(text);
    EXPECT_NE(e.find("--lengths: "), std::string::npos) << text << ": " << e;
    EXPECT_NE(e.find(says), std::string::npos) << text << ": " << e;
  }
}

TEST(Lengths, AHistogramFileIsCheckedFieldByField) {
  const std::string f = ::testing::TempDir() + "/lengths-hist.json";
  auto write = [&](const std::string& text) { std::ofstream(f) << text; };
  write(R"({"lengths": [16, 64], "weights": [3, 1]})");
  const LengthSpec s = parse_lengths("histogram:file=" + f);
  EXPECT_EQ(s.lengths, (std::vector<double>{16, 64}));
  write(R"({"lengths": [16, 64], "weights": [3]})");
  EXPECT_NE(refusal("histogram:file=" + f).find("/weights: expected one weight per length"), std::string::npos);
  write(R"({"lengths": [16, 6.5], "weights": [3, 1]})");
  EXPECT_NE(refusal("histogram:file=" + f).find("/lengths/1: expected a whole number of tokens"), std::string::npos);
  write(R"({"lengths": [16], "weights": [0]})");
  EXPECT_NE(refusal("histogram:file=" + f).find("at least one weight above 0"), std::string::npos);
  write(R"({"lengths": [16], "weights": [1], "bins": 3})");
  EXPECT_NE(refusal("histogram:file=" + f).find(f), std::string::npos);
  // The histogram's draws are its lengths alone, about in its weights' proportion.
  write(R"({"lengths": [16, 64], "weights": [3, 1]})");
  const auto t = tokens(draw_sequences(parse_lengths("histogram:file=" + f), 4000, 128), 128);
  const auto sixteen = std::count(t.begin(), t.end(), 16.0), sixty_four = std::count(t.begin(), t.end(), 64.0);
  EXPECT_EQ(sixteen + sixty_four, 4000);
  EXPECT_NEAR(static_cast<double>(sixteen) / 4000, 0.75, 0.03);
}

TEST(Lengths, DrawsStayInTheSequenceAndRepeatWithTheSeed) {
  const LengthSpec s = parse_lengths("lognormal:median=64,sigma=1.0");
  const auto a = draw_sequences(s, 10000, 256), b = draw_sequences(s, 10000, 256);
  const auto c = draw_sequences(s, 10000, 256, 1);  // the next step: another batch
  std::vector<double> t = tokens(a, 256);
  EXPECT_EQ(t, tokens(b, 256));
  EXPECT_NE(t, tokens(c, 256));
  EXPECT_EQ(*std::min_element(t.begin(), t.end()) >= 1, true);
  EXPECT_EQ(*std::max_element(t.begin(), t.end()), 256);  // the tail cut to the sequence
  std::nth_element(t.begin(), t.begin() + 5000, t.end());
  EXPECT_NEAR(t[5000], 64, 4);  // the median (10,000 draws)
  for (const auto& q : a) EXPECT_DOUBLE_EQ(q.attention, q.tokens * q.tokens);
  // fixed: every sequence full.
  for (const auto& q : draw_sequences(parse_lengths("fixed"), 8, 256)) {
    EXPECT_EQ(q.tokens, 1);
    EXPECT_EQ(q.attention, 1);
  }
}

TEST(Lengths, PackedDocumentsFillTheBudgetAndAttendAlone) {
  const auto s = draw_sequences(parse_lengths("uniform:min=10,max=30,pack=docs"), 100, 256);
  for (const auto& q : s) {
    EXPECT_EQ(q.tokens, 1);
    // Documents of at most 30 tokens filling 256: the sum of their squares at most 30 x 256; at
    // most 26 documents (of at least 10), so at least 256^2 / 26.
    EXPECT_LE(q.attention, 30.0 / 256);
    EXPECT_GE(q.attention, 1.0 / 26);
    EXPECT_LT(q.attention, 0.5);
  }
}
