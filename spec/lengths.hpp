// The data's sample lengths (`--lengths SPEC`): real inputs differ in length, and so in work, which
// makes some ranks stragglers (FreeScale, arXiv 2604.24073). A distribution of lengths in tokens,
// drawn with a seed, and how samples fill a sequence: each sample its own sequence up to the
// model's seq_length (pack=none: the tokens vary), or documents packed into each sequence's budget
// with no attention across them (pack=docs: the tokens are the budget, the attention is the sum of
// each document's own, quadratic in its length).
//
//   fixed                                    every sample seq_length tokens (the default)
//   uniform:min=A,max=B                      whole tokens, uniform in [A, B]
//   lognormal:median=M,sigma=S[,max=X]       exp(N(ln M, S)), rounded, at most X
//   histogram:file=F                         F: {"lengths": [...], "weights": [...]}
// and with any of them: pack=none|docs, seed=N (default 1). A length above seq_length is cut to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sax {

struct LengthSpec {
  enum class Kind { fixed, uniform, lognormal, histogram };
  enum class Pack { none, docs };
  Kind kind = Kind::fixed;
  Pack pack = Pack::none;
  double min = 1, max = 0;       // uniform: both; lognormal: max (0: seq_length)
  double median = 0, sigma = 0;  // lognormal
  std::vector<double> lengths;   // histogram
  std::vector<double> weights;   // histogram, one per length
  std::uint64_t seed = 1;
  std::string text;  // as given
  bool uneven() const { return kind != Kind::fixed; }
};

// A UsageError naming `flag` (and the histogram file and field) when the text is not a spec.
LengthSpec parse_lengths(const std::string& text, const std::string& flag = "--lengths");

// One sequence's work as a share of a full one (seq_length tokens, unpacked): its tokens' share
// (what GEMMs, norms and messages scale with) and its attention's (the score matrix: the sum over
// its documents of length², over seq_length²).
struct SequenceShare {
  double tokens = 1, attention = 1;
};

// The `n` sequences of a step, drawn from the spec with its seed and `step`, each of at most
// `seq_length` tokens. The same on every rank (each rank draws the whole batch).
std::vector<SequenceShare> draw_sequences(const LengthSpec& spec, std::int64_t n, std::int64_t seq_length,
                                          std::int64_t step = 0);

}  // namespace sax
