// The name of a job's boundary-pacing state on a host, shared by the pacer that makes it
// (collectives/link_pacer.hpp) and the launcher that removes a job's at its end (a job whose last
// rank was killed cannot). Header-only: the NCCL net plugin's shared library uses it too.
#pragma once

#include <unistd.h>

#include <cctype>
#include <string>

namespace sax {

// The shared-memory name (for shm_open/shm_unlink) of `pacing_key`'s segment for this effective
// user: "/sax-<key>-<euid>", the key's characters other than [A-Za-z0-9.-] as '_'.
inline std::string pacing_segment_name(const std::string& pacing_key) {
  std::string name = "/sax-";
  for (char c : pacing_key.substr(0, 200))
    name += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
  return name + "-" + std::to_string(::geteuid());
}

}  // namespace sax
