// The watch on a built testbed's shaping: its packet-filter rules (the NFQUEUE rules that hand
// each arrival to a delay helper) and its traffic-control state (htb in each device's namespace,
// tbf on the host's ends of the links). Once the testbed is built nothing of the job changes
// either, so any change the kernel announces on the namespaces' netlink groups (nf_tables,
// traffic control, links) means the boundary no longer is what the launch says: a flushed
// mangle table lets packets skip their delay (the rules bypass a queue no helper holds), a
// replaced qdisc changes the rate. The kernel announces; nothing is polled, so the watch costs
// the job nothing while it holds.
#pragma once

#include <string>
#include <vector>

namespace sax::launcher {

class ShapingWatch {
 public:
  // Starts listening in each of `namespaces` (names under /run/netns) and, for the links whose
  // names start with `host_prefix`, in this process's own namespace. Throws RunError when a
  // socket cannot be had (the testbed could not be watched, so it is not started).
  ShapingWatch(const std::vector<std::string>& namespaces, const std::string& host_prefix);
  ~ShapingWatch();
  ShapingWatch(const ShapingWatch&) = delete;
  ShapingWatch& operator=(const ShapingWatch&) = delete;

  // "" while nothing was announced; else what changed and where (said once found, for good).
  // Never waits.
  std::string changed();

 private:
  struct Socket {
    int fd;
    std::string where;  // "sax-0-d1", or "the host" (filtered by host_prefix)
    bool host;
    bool filter;  // nf_tables; else traffic control and links
  };
  std::vector<Socket> sockets_;
  std::string host_prefix_;
  std::string changed_;
};

}  // namespace sax::launcher
