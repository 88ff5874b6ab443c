// The calibration's link fits: per link class and op, the α-β coefficients of the
// cost model's one collective formula (spec/collective.hpp),
//     time = steps(op, n) · α + bus_factor(op, n) · bytes · β,
// from measured (op, ranks, bytes, time) points, e.g. `sax bench coll --json` results.
//
// The fit is robust: iteratively reweighted least squares with Huber's weights (k = 1.345) on
// relative residuals, the scale re-estimated each round as 1.4826 × their median absolute value,
// so a few slow outliers (a rank descheduled, a retransmission) do not drag the line. Residuals
// are relative (each equation weighted by 1 / time) because sizes span decades: an absolute fit
// would let the largest messages decide α. Coefficients are kept physical: a negative α or β is
// refitted with that term fixed at 0. The linear algebra is Eigen's (QR with column pivoting).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

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
  AlphaBeta coefficients;       // α (µs per step), β (ns per bus byte) and r2, max_rel_error, samples
  double rel_residual_p50 = 0;  // percentiles of |predicted − measured| / measured over the points
  double rel_residual_p95 = 0;
  std::int64_t downweighted = 0;  // points Huber's weights discounted in the last round (outliers)
  int iterations = 0;
};

// Fits one op's points (any group sizes: steps and bus_factor are worked out per point). Needs
// at least two points of different bus traffic and positive, finite times and sizes: otherwise
// an InputError naming `what` (where the points came from).
LinkFit fit_alpha_beta(const std::vector<CollPoint>& points, const std::string& what);

// Fits each (link class, op)'s points (`what` names where they came from, for errors) into
// `cal.links`, and returns the table of the fits, one line each, with its header. A fit that
// resolves no bandwidth (times that do not grow with size), or whose α or β is outside what a
// calibration holds (spec/bounds), is not written: the datasheet stays.
using LinkPoints = std::map<std::pair<LinkClass, CollOp>, std::vector<CollPoint>>;
std::string fit_links(const LinkPoints& points, const std::function<std::string(LinkClass, CollOp)>& what,
                      Calibration& cal);

// The predicted time of `p` under `ab`.
double predict_us(const AlphaBeta& ab, const CollPoint& p);

// The points of a `sax bench coll --json` file (version 2: "results" with op, ranks, bytes,
// time_us). InputError naming the file and the field for anything else.
std::vector<CollPoint> read_bench_coll_points(const json& doc, const std::string& file);

}  // namespace sax::calibration
