// `sax calibrate export`: a calibration (with its cluster's shape) as the input files of two
// public simulators, so that the figures measured here feed them:
//   - ASTRA-sim 2.x's analytical network backend (network.yml: topology, npus_count, bandwidth
//     in GB/s of 2^30 bytes per link and direction, latency in ns per hop, one entry per
//     dimension of more than one NPU — astra-network-analytical's NetworkParser);
//   - Calculon's system description (systems/*.json: matrix/vector peaks with efficiency tables
//     by GFLOP of one op, mem1/mem2, and per network tier bandwidth in GB/s of 1e9 bytes, latency
//     in seconds per op, the ring ops' scalars and offsets, processor_usage — calculon's
//     system.py, network.py, memory.py).
// Each figure comes from the calibration where it has one and from the cluster's datasheet
// otherwise; `notes` says which, one line per figure. Both take one α-β per link: a fit in size
// regimes gives its large-message regime (the entry's own α and β), which the ASTRA-sim file's
// comment and each link's note say (Calculon's JSON holds no comment).
#pragma once

#include <string>
#include <vector>

#include "spec/calibration.hpp"
#include "spec/cluster.hpp"
#include "spec/fields.hpp"

namespace sax::calibration {

struct Export {
  std::string text;                // the file's contents
  std::vector<std::string> notes;  // where each figure came from
};

Export astra_sim_network(const Calibration& k, const Cluster& c);
Export calculon_system(const Calibration& k, const Cluster& c, DType dtype);

}  // namespace sax::calibration
