#include "launcher/shaping_watch.hpp"

#include <fcntl.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "spec/error.hpp"

namespace sax::launcher {

namespace {

int netlink_socket(int protocol, unsigned groups, int member) {
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, protocol);
  if (fd < 0) return -1;
  sockaddr_nl a{};
  a.nl_family = AF_NETLINK;
  a.nl_groups = groups;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      (member > 0 && ::setsockopt(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &member, sizeof member) != 0)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The two sockets of one namespace: traffic control and links (route), and nf_tables.
struct Pair {
  int route = -1, filter = -1;
  std::string error;
};

// The host's rules are not the testbed's (its NFQUEUE rules are in the devices' namespaces): the
// host is watched for traffic control and links alone.
Pair open_pair(bool filter) {
  Pair p;
  p.route = netlink_socket(NETLINK_ROUTE, RTMGRP_TC | RTMGRP_LINK, 0);
  if (filter && p.route >= 0) p.filter = netlink_socket(NETLINK_NETFILTER, 0, NFNLGRP_NFTABLES);
  if (p.route < 0 || (filter && p.filter < 0)) p.error = std::strerror(errno);
  return p;
}

// A socket stays in the namespace it was made in; setns changes only the calling thread's, so a
// thread of its own makes them there.
Pair open_pair_in(const std::string& ns) {
  Pair p;
  std::thread([&] {
    const int nsfd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (nsfd < 0 || ::setns(nsfd, CLONE_NEWNET) != 0) {
      p.error = std::strerror(errno);
      if (nsfd >= 0) ::close(nsfd);
      return;
    }
    ::close(nsfd);
    p = open_pair(true);
  }).join();
  return p;
}

std::string filter_change(int type) {
  switch (type & 0xff) {
    case NFT_MSG_DELTABLE:
      return "a packet-filter table was deleted";
    case NFT_MSG_DELCHAIN:
      return "a packet-filter chain was deleted";
    case NFT_MSG_DELRULE:
      return "a packet-filter rule was deleted (the delay queues are bypassed)";
    case NFT_MSG_NEWRULE:
      return "a packet-filter rule was added";
    default:
      return "its packet-filter rules changed";
  }
}

std::string route_change(int type) {
  switch (type) {
    case RTM_NEWQDISC:
      return "a qdisc was added or changed";
    case RTM_DELQDISC:
      return "a qdisc was deleted";
    case RTM_NEWTCLASS:
      return "a traffic class was added or changed";
    case RTM_DELTCLASS:
      return "a traffic class was deleted";
    case RTM_NEWTFILTER:
      return "a traffic filter was added or changed";
    case RTM_DELTFILTER:
      return "a traffic filter was deleted";
    case RTM_DELLINK:
      return "a link was deleted";
    default:
      return "";  // a link's state announced (carrier, statistics): not shaping
  }
}

// The link a route message is about, by name ("" when it cannot be told).
std::string link_of(const nlmsghdr* h) {
  if (h->nlmsg_type == RTM_DELLINK) {
    const auto* info = static_cast<const ifinfomsg*>(NLMSG_DATA(h));
    int len = static_cast<int>(h->nlmsg_len) - static_cast<int>(NLMSG_LENGTH(sizeof *info));
    for (const rtattr* a = IFLA_RTA(info); RTA_OK(a, len); a = RTA_NEXT(a, len))
      if (a->rta_type == IFLA_IFNAME) return std::string(static_cast<const char*>(RTA_DATA(a)));
    return "";
  }
  const auto* tc = static_cast<const tcmsg*>(NLMSG_DATA(h));
  char name[IF_NAMESIZE] = {};
  return ::if_indextoname(static_cast<unsigned>(tc->tcm_ifindex), name) ? std::string(name) : "";
}

}  // namespace

ShapingWatch::ShapingWatch(const std::vector<std::string>& namespaces, const std::string& host_prefix)
    : host_prefix_(host_prefix) {
  auto keep = [this](const Pair& p, const std::string& where, bool host) {
    if (p.route >= 0) sockets_.push_back({p.route, where, host, false});
    if (p.filter >= 0) sockets_.push_back({p.filter, where, host, true});
    if (!p.error.empty())
      throw RunError("--emulate netns: cannot watch the shaping of " + where + " (netlink: " + p.error + ")");
  };
  try {
    for (const std::string& ns : namespaces) keep(open_pair_in(ns), ns, false);
    keep(open_pair(false), "the host", true);
  } catch (...) {
    for (const Socket& s : sockets_) ::close(s.fd);
    throw;
  }
}

ShapingWatch::~ShapingWatch() {
  for (const Socket& s : sockets_) ::close(s.fd);
}

std::string ShapingWatch::changed() {
  if (!changed_.empty()) return changed_;
  alignas(nlmsghdr) char buf[16384];
  for (const Socket& s : sockets_) {
    for (;;) {
      const ssize_t n = ::recv(s.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0 && errno == ENOBUFS)  // more announced than the socket held: something changed
        return changed_ = "the shaping of " + s.where + " changed (more changes than could be followed)";
      if (n <= 0) break;
      int len = static_cast<int>(n);
      // The kernel's NLMSG_OK compares the header's u32 length with the int length it is given.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
      for (const auto* h = reinterpret_cast<const nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
#pragma GCC diagnostic pop
        if (h->nlmsg_type < NLMSG_MIN_TYPE) continue;  // netlink's own (done, error)
        const std::string what = s.filter ? filter_change(h->nlmsg_type) : route_change(h->nlmsg_type);
        if (what.empty()) continue;
        std::string where = s.where;
        if (!s.filter) {
          const std::string link = link_of(h);
          // The host carries other slots' testbeds and everything else: only this slot's links count.
          if (s.host && link.rfind(host_prefix_, 0) != 0) continue;
          if (!link.empty()) where += " (" + link + ")";
        }
        return changed_ = "the shaping of " + where + " changed: " + what;
      }
    }
  }
  return "";
}

}  // namespace sax::launcher
