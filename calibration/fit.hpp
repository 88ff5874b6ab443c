// The calibration's link fits: per link class and op, the α-β coefficients of the
// cost model's one collective formula (spec/collective.hpp, spec/alpha_beta.hpp),
//     time = steps(op, n) · α + bus_factor(op, n) · bytes · β,
// from measured (op, ranks, bytes, time) points, e.g. `sax bench coll --json` results.
//
// The fit is robust: iteratively reweighted least squares with Huber's weights (k = 1.345) on
// relative residuals, the scale re-estimated each round as 1.4826 × their median absolute value,
// so a few slow outliers (a rank descheduled, a retransmission) do not drag the line. Residuals
// are relative (each equation weighted by 1 / time) because sizes span decades: an absolute fit
// would let the largest messages decide α. Coefficients are kept physical: a negative α or β is
// refitted with that term fixed at 0. The linear algebra is Eigen's (QR with column pivoting).
//
// Transports switch protocol by size (eager and rendezvous, NCCL's LL, LL128 and Simple), so the
// time by size is a broken line: up to three regimes, contiguous ranges of the sorted distinct
// sizes (each at least kMinRegimeSizes of them), each its own robust line. Every split is tried;
// the split chosen is the one with the least robust Schwarz criterion
//     2 Σ ρ_Huber(r_i / σ) + 2 · (3R − 1) · ln n
// (r_i the n points' relative residuals, each in its regime; 2 coefficients per regime and 1 per
// break, the penalty doubled because the breaks are searched for; σ one winsorised scale for
// every split: the least of theirs, then the chosen split's until the choice stands), so a
// straight line with noise and outliers is one regime and a break must pay for itself — and be
// material: the split is chosen among those of the fewest regimes whose chosen split meets every
// point but the outliers within kMaterialMisfit (one line where it does; a second break only
// where two lines miss by more).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "spec/alpha_beta.hpp"
#include "spec/calibration.hpp"
#include "spec/collective.hpp"
#include "spec/fields.hpp"

namespace sax::calibration {

struct CollPoint {
  CollOp op = CollOp::all_reduce;
  int ranks = 0;       // the group's size
  double bytes = 0;    // nccl-tests' size of the op
  double time_us = 0;  // measured time of one op
};

struct LinkFit {
  // Its regimes (from_bytes, α µs per step, β ns per bus byte, per-regime r2 and samples), the
  // entry's α and β (the last regime's), and the quality over every point: r2, max_rel_error,
  // samples, the median and p90 relative error, and the outliers (more than kOutlierScales
  // scales off their regime's line).
  AlphaBeta coefficients;
  std::int64_t downweighted = 0;  // points Huber's weights discounted in the last round
  int iterations = 0;             // the most any regime's fit took
};

inline constexpr std::size_t kMinRegimeSizes = 3;  // distinct sizes a regime needs
inline constexpr double kOutlierScales = 3.0;      // a point this many robust scales off is listed
// A break is fitted only where fewer lines miss some point (outliers aside) by more than this:
// a bend within it changes no price that matters, and cut into regimes it leaves regimes too
// flat (latency alone) for their R² to mean anything.
inline constexpr double kMaterialMisfit = 0.05;
// Under this R² the table says why beside the row: the times are flat (its p90 error within
// kFlatFitError: the line fits, there is little spread to explain) or the line misses them.
inline constexpr double kLowR2 = 0.5;
inline constexpr double kFlatFitError = 0.10;

// Fits one op's points into up to `max_regimes` regimes (any group sizes: steps and bus_factor are
// worked out per point). Needs at least two points of different bus traffic and positive, finite
// times and sizes: otherwise an InputError naming `what` (where the points came from).
LinkFit fit_alpha_beta(const std::vector<CollPoint>& points, const std::string& what,
                       std::size_t max_regimes = kMaxLinkRegimes);

// Fits each (link class, op)'s points (`what` names where they came from, for errors) into
// `cal.links`, and returns the table of the fits, one line each, with its header. A fit that
// resolves no bandwidth (times that do not grow with size), or whose α or β (of any regime) is
// outside what a calibration holds (spec/bounds), is not written: the datasheet stays. One line
// per regime, its outliers and (with regimes) the quality over every size on lines of their own.
using LinkPoints = std::map<std::pair<LinkClass, CollOp>, std::vector<CollPoint>>;
std::string fit_links(const LinkPoints& points, const std::function<std::string(LinkClass, CollOp)>& what,
                      Calibration& cal);

// The predicted time of `p` under `ab`: in the regime its size falls in (spec/alpha_beta.hpp).
double predict_us(const AlphaBeta& ab, const CollPoint& p);

// The points of a `sax bench coll --json` file (version 2: "results" with op, ranks, bytes,
// time_us). InputError naming the file and the field for anything else.
std::vector<CollPoint> read_bench_coll_points(const json& doc, const std::string& file);

}  // namespace sax::calibration
