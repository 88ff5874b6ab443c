// The fits of a calibration sweep's points (calibration/points_file.hpp): α-β per link class and
// op from the points of every group at once (fit.hpp), the cross-building oversubscription from the
// sizes measured both alone and together, the compute efficiency curves and HBM fraction, and the
// overlap slowdown.
#pragma once

#include <string>

#include "spec/calibration.hpp"
#include "spec/fields.hpp"

namespace sax::calibration {

// Link points are {group, link_class, op, ranks, groups, bytes, together, time_us, ...}; compute
// points {kind: compute, compute: gemm | product | attention | memory, flops, bytes, time_us,
// peak_flops, hbm_bytes_per_s, and quantization (the op's tile and wave quantization when
// measured, 1 when absent), ...}; overlap points {kind: overlap, alone_us, comm_us, time_us}.
// `table` gets the readable report. InputError naming `what` for points that cannot be fitted.
Calibration fit_sweep(const json& points, const std::string& what, std::string* table);

// An InputError naming `what` where the calibration reader (spec/calibration.hpp) would refuse
// `cal`: what fits of hostile points make is refused instead of written.
void check_readable(const Calibration& cal, const std::string& what);

// A paced cluster's file (`cluster`, its JSON as read) with every device it declares slowed to the
// one this host held (`held`): each peak and memory bandwidth times held / declared where that is
// below 1, rounded down to 4 digits, and a comment saying so (`source`: the command that measured
// it); where the host held the declared device, the file as it was. A device the host cannot
// carry overruns its ops, and what runs is then the host, not the device the explorer priced.
json held_cluster(const json& cluster, const HeldDevice& held, const std::string& source);

}  // namespace sax::calibration
