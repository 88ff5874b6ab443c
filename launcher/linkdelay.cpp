// sax-linkdelay: what a device's side of an emulated building boundary does to the packets that
// arrive from other buildings, where the kernel has no netem (../shared/TESTBED.md "Kernel traffic
// shaping"): it paces them at the device's rate, holds each for its link's one-way latency (plus a
// jitter), and drops a share of them at random (the link's loss). `sax launch --emulate netns`
// starts one inside each device's network namespace, with a queue per kind of arrival (a latency,
// jitter and loss) that iptables NFQUEUE rules in that namespace's PREROUTING chain fill with the
// packets from each other building.
//
//   sax-linkdelay [--rate-gbps R] [--clocks FILE --building B --block P --device-gbps R,...
//                 --uplink-gbps U,...] --queue N --delay-us D [--jitter-us J]
//                 [--loss P] [--queue ...] [--seed S] [--stats]
//
// --rate-gbps: this device's rate across the boundary, GB/s of TCP/UDP payload (what the cost
// model moves); 0 or absent: not paced. --clocks: the testbed's shared clocks (a file of int64
// nanoseconds: each building's uplink out, then in, then P per building for its devices' NICs
// out), which every
// device's helper paces through too: a packet from another building passes its sender's NIC (at
// that building's --device-gbps), its sender's uplink out and this building's uplink in (at their
// --uplink-gbps), then this NIC; the sender is the packet's source address, building j's devices
// holding the aligned block [(j+1)·P, (j+2)·P). --stats: at the end, per
// queue, how late the packets were let go (percentiles, µs after their time) and how many were
// dropped.
//
// Pacing is by virtual clocks: at each stage a packet's bytes start when the stage has passed the
// bytes before them (cut through: the next stage may start on them as they come) and take their
// size at its rate; the packet goes D µs (+ jitter) after its last byte at the slowest stage — a
// message of S bytes so takes D + S / R after an idle gap as in a stream, with no token bucket
// letting its first bytes through at the veth's speed; devices crossing at once share each
// uplink's clock as they share the link; and a helper woken late lets the packets that are due go
// at once without losing the rate (no stage's clock waits for a wake-up). Packets of a queue leave in arrival
// order (jitter never reorders them). TCP's large segments are held whole, except on a lossy
// queue: there the kernel cuts them into packets first, so that loss is per packet as on a wire.
// The program waits on a timer (timerfd, absolute CLOCK_MONOTONIC) set to the earliest release
// time, never spinning: on a host with fewer cores than ranks a busy-waiting holder steals the
// CPU the ranks need. It prints "ready" once every queue is bound (the launcher waits for that
// line before starting ranks) and on SIGTERM/SIGINT lets what it holds go and ends, saying so only
// if the kernel dropped packets before they reached it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

struct Held {
  std::uint32_t id;
  std::int64_t release_ns;
};

struct State;

struct Queue {
  State* state = nullptr;
  long num = -1;
  double delay_us = 0, jitter_us = 0, loss = 0;
  nfq_q_handle* handle = nullptr;
  std::deque<Held> held;
  std::int64_t last_release_ns = 0;  // order kept: nothing leaves before the packet ahead of it
  std::uint64_t packets = 0, dropped = 0, stamped = 0;
  std::vector<std::int32_t> late_us;  // --stats: how late each packet was let go (µs after its time)
};

struct State {
  std::vector<std::unique_ptr<Queue>> queues;
  double ns_per_byte = 0;        // this device's rate, inverted (0: not paced)
  std::int64_t nic_free_ns = 0;  // its NIC's clock: when it has passed every byte it took
  // The testbed's shared clocks (null: this NIC's alone), and what reads a packet's sender.
  std::atomic<std::int64_t>* clocks = nullptr;
  int building = 0, block = 1;
  std::vector<double> device_ns_per_byte;  // per building
  std::vector<double> uplink_ns_per_byte;  // per building
  std::mt19937_64 rng;
  std::uniform_real_distribution<double> unit{0.0, 1.0};
  std::uint64_t lost = 0;  // the netlink socket overflowed: packets the kernel could not hand over
  // How late the timer wakes the helper (a moving average): the timer is armed that much early,
  // so that packets go on time on average rather than always late by the host's wake-up time
  // (tens of µs on a VM even at real-time priority). At most a quarter of the shortest delay.
  std::int64_t advance_ns = 0, advance_cap_ns = 0;
  std::int64_t armed_for = -1;  // when the armed timer should fire (-1: not armed)
};

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

std::int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// The transport payload of an IPv4 packet (TCP or UDP; its headers read from the copied bytes),
// what the rate is in: a TCP segment of 1448 bytes is 1448, a bare acknowledgement 0.
std::int64_t payload_bytes(nfq_data* data) {
  unsigned char* p = nullptr;
  const int n = nfq_get_payload(data, &p);
  if (n < 20 || p == nullptr || (p[0] >> 4) != 4) return 0;
  const int ip_header = (p[0] & 0x0f) * 4;
  const int total = (p[2] << 8) | p[3];
  int transport_header = 0;
  if (p[9] == 6 && n >= ip_header + 13)
    transport_header = (p[ip_header + 12] >> 4) * 4;  // TCP's data offset
  else if (p[9] == 17)
    transport_header = 8;
  return std::max(0, total - ip_header - transport_header);
}

// The source address's host byte (the testbed is one /24).
int source_host(nfq_data* data) {
  unsigned char* p = nullptr;
  return nfq_get_payload(data, &p) >= 20 && p != nullptr ? p[15] : -1;
}

// One stage of the path: its clock `free` (when it has passed every byte it took) and its time
// per byte. The packet's bytes start at the later of `start` and the clock; returns when they
// start, with `end` raised to when they are through.
std::int64_t stage(std::int64_t& free, std::int64_t start, double ns, std::int64_t& end) {
  start = std::max(start, free);
  free = start + static_cast<std::int64_t>(ns);
  end = std::max(end, free);
  return start;
}
std::int64_t shared_stage(std::atomic<std::int64_t>& free, std::int64_t start, double ns, std::int64_t& end) {
  std::int64_t seen = free.load(std::memory_order_relaxed), begin = 0;
  do {
    begin = std::max(start, seen);
  } while (!free.compare_exchange_weak(seen, begin + static_cast<std::int64_t>(ns), std::memory_order_relaxed));
  end = std::max(end, begin + static_cast<std::int64_t>(ns));
  return begin;
}

// When a packet that arrived at `arrived` has passed every stage of its path.
std::int64_t paced(State& s, nfq_data* data, std::int64_t arrived) {
  if (!(s.ns_per_byte > 0)) return arrived;
  const double bytes = static_cast<double>(payload_bytes(data));
  std::int64_t start = arrived, end = arrived;
  const int host = source_host(data), buildings = static_cast<int>(s.device_ns_per_byte.size());
  const int from = host / s.block - 1;
  if (s.clocks != nullptr && host >= 0 && from >= 0 && from < buildings && from != s.building) {
    std::atomic<std::int64_t>* uplink_out = s.clocks;
    std::atomic<std::int64_t>* uplink_in = s.clocks + buildings;
    std::atomic<std::int64_t>* nic_out = s.clocks + 2 * buildings;
    const auto j = static_cast<std::size_t>(from), b = static_cast<std::size_t>(s.building);
    start = shared_stage(nic_out[from * s.block + host % s.block], start, bytes * s.device_ns_per_byte[j], end);
    start = shared_stage(uplink_out[j], start, bytes * s.uplink_ns_per_byte[j], end);
    start = shared_stage(uplink_in[b], start, bytes * s.uplink_ns_per_byte[b], end);
  }
  stage(s.nic_free_ns, start, bytes * s.ns_per_byte, end);
  return end;
}

int on_packet(nfq_q_handle*, nfgenmsg*, nfq_data* data, void* arg) {
  auto* q = static_cast<Queue*>(arg);
  State& s = *q->state;
  const nfqnl_msg_packet_hdr* h = nfq_get_msg_packet_hdr(data);
  if (h == nullptr) return 0;
  ++q->packets;
  if (q->loss > 0 && s.unit(s.rng) < q->loss) {
    ++q->dropped;
    nfq_set_verdict(q->handle, ntohl(h->packet_id), NF_DROP, 0, nullptr);
    return 0;
  }
  // The delay counts from the packet's arrival in the namespace (the kernel's receive timestamp),
  // not from the moment this process woke up to read it: the wake-up is not part of the link.
  std::int64_t arrived = now_ns();
  timeval tv{};
  if (nfq_get_timestamp(data, &tv) == 0 && tv.tv_sec > 0) {
    timespec real{};
    clock_gettime(CLOCK_REALTIME, &real);
    const std::int64_t age = (static_cast<std::int64_t>(real.tv_sec) - tv.tv_sec) * 1000000000 +
                             (real.tv_nsec - static_cast<std::int64_t>(tv.tv_usec) * 1000);
    if (age > 0 && age < static_cast<std::int64_t>(q->delay_us * 1000) + 1000000) arrived -= age, ++q->stamped;
  }
  const std::int64_t passed = paced(s, data, arrived);
  const double jitter_ns = q->jitter_us > 0 ? q->jitter_us * 1000.0 * s.unit(s.rng) : 0.0;
  const std::int64_t release =
      std::max(q->last_release_ns, passed + static_cast<std::int64_t>(q->delay_us * 1000.0 + jitter_ns));
  q->last_release_ns = release;
  q->held.push_back({ntohl(h->packet_id), release});
  return 0;
}

// The earliest release time of what any queue holds (-1: nothing held).
std::int64_t next_release(const State& s) {
  std::int64_t t = -1;
  for (const auto& q : s.queues)
    if (!q->held.empty() && (t < 0 || q->held.front().release_ns < t)) t = q->held.front().release_ns;
  return t;
}

void arm(int timer, State& s) {
  itimerspec when{};
  s.armed_for = -1;
  if (const std::int64_t next = next_release(s); next >= 0) {
    const std::int64_t t = std::max<std::int64_t>(1, next - s.advance_ns);
    s.armed_for = t;
    when.it_value.tv_sec = static_cast<time_t>(t / 1000000000);
    when.it_value.tv_nsec = static_cast<long>(t % 1000000000);
  }
  timerfd_settime(timer, TFD_TIMER_ABSTIME, &when, nullptr);  // all zero: disarmed
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "sax-linkdelay: %s\n", what.c_str());
  std::exit(2);
}

struct QueueOptions {
  long num = -1;
  double delay_us = -1, jitter_us = 0, loss = 0;
};

struct Options {
  std::vector<QueueOptions> queues;
  double rate_gbps = 0;
  std::string clocks;
  int building = -1, block = 0;
  std::vector<double> device_gbps, uplink_gbps;
  unsigned long long seed = 0;
  bool seeded = false;
  bool stats = false;
};

constexpr const char* kUsage =
    "usage: sax-linkdelay [--rate-gbps R] [--clocks FILE --building B --block P "
    "--device-gbps R,... --uplink-gbps U,...] --queue N --delay-us D [--jitter-us J] [--loss P] [--queue ...] "
    "[--seed S] [--stats]";

double number(const std::string& key, const char* text, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0') die(key + ": expected a number, got '" + text + "'");
  if (!(v >= lo && v <= hi))
    die(key + ": expected " + std::to_string(lo) + " to " + std::to_string(hi) + ", got " + text);
  return v;
}

std::vector<double> numbers(const std::string& key, const std::string& text, double lo, double hi) {
  std::vector<double> v;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    v.push_back(number(key, text.substr(at, comma - at).c_str(), lo, hi));
    at = comma + 1;
  }
  return v;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--stats") {
      o.stats = true;
      continue;
    }
    if (i + 1 >= argc) die(k + ": expected a value (" + kUsage + ")");
    const char* v = argv[++i];
    if (k == "--queue") {
      o.queues.push_back({static_cast<long>(number(k, v, 0, 65535)), -1, 0, 0});
      if (o.queues.back().num != number(k, v, 0, 65535)) die(k + ": expected a whole number, got '" + v + "'");
    } else if (k == "--rate-gbps") {
      o.rate_gbps = number(k, v, 0, 1e5);
    } else if (k == "--clocks") {
      o.clocks = v;
    } else if (k == "--building") {
      o.building = static_cast<int>(number(k, v, 0, 1023));
    } else if (k == "--block") {
      o.block = static_cast<int>(number(k, v, 1, 256));
    } else if (k == "--device-gbps") {
      o.device_gbps = numbers(k, v, 1e-6, 1e5);
    } else if (k == "--uplink-gbps") {
      o.uplink_gbps = numbers(k, v, 1e-6, 1e5);
    } else if (k == "--seed") {
      o.seed = static_cast<unsigned long long>(number(k, v, 0, 1e18)), o.seeded = true;
    } else if (o.queues.empty()) {
      die(k + ": comes after the --queue it is for (" + kUsage + ")");
    } else if (k == "--delay-us") {
      o.queues.back().delay_us = number(k, v, 0, 10e6);
    } else if (k == "--jitter-us") {
      o.queues.back().jitter_us = number(k, v, 0, 10e6);
    } else if (k == "--loss") {
      o.queues.back().loss = number(k, v, 0, 1);
    } else {
      die("unknown option '" + k + "' (" + kUsage + ")");
    }
  }
  if (o.queues.empty()) die(kUsage);
  if (!o.clocks.empty()) {
    const std::size_t n = o.device_gbps.size();
    if (o.building < 0 || o.block < 1 || n == 0 || static_cast<std::size_t>(o.building) >= n ||
        o.uplink_gbps.size() != n || !(o.rate_gbps > 0))
      die("--clocks: expected --rate-gbps, --building (one of the buildings), --block, and --device-gbps, "
          "--uplink-gbps with a value per building");
  }
  for (const auto& q : o.queues)
    if (q.delay_us < 0) die("--queue " + std::to_string(q.num) + ": expected its --delay-us (" + kUsage + ")");
  return o;
}

// Binds every queue to s (on_packet receives their packets) and returns the library handle.
nfq_handle* open_queues(State& s) {
  nfq_handle* h = nfq_open();
  if (h == nullptr) die(std::string("nfq_open: ") + std::strerror(errno) + " (needs root in the namespace)");
  nfq_unbind_pf(h, AF_INET);  // older kernels want a fresh binding; failure is harmless
  if (nfq_bind_pf(h, AF_INET) < 0) die(std::string("nfq_bind_pf: ") + std::strerror(errno));
  for (auto& q : s.queues) {
    q->handle = nfq_create_queue(h, static_cast<std::uint16_t>(q->num), &on_packet, q.get());
    if (q->handle == nullptr) die("nfq_create_queue " + std::to_string(q->num) + ": " + std::strerror(errno));
    // The IP and TCP headers are what is read (the payload's size); and TCP's large segments
    // whole (without F_GSO the kernel cuts each into MTU-sized packets first) unless packets are
    // to be lost one by one.
    if (nfq_set_mode(q->handle, NFQNL_COPY_PACKET, 64) < 0) die(std::string("nfq_set_mode: ") + std::strerror(errno));
    if (q->loss == 0) nfq_set_queue_flags(q->handle, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);
    // Room for every packet in flight on the link during the delay (the kernel's default is 1024).
    nfq_set_queue_maxlen(q->handle, 1 << 16);
  }
  nfnl_rcvbufsiz(nfq_nfnlh(h), 16u << 20);
  // The kernel stamps received packets only while some socket asks for timestamps: this one does,
  // left open until the program ends.
  const int stamp_socket = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  if (stamp_socket >= 0) setsockopt(stamp_socket, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on);
  return h;
}

// The link must not slow down because the ranks keep the cores busy: wake on time (no timer
// slack) and, where permitted, ahead of the ranks (a real-time priority; the helper only ever
// sleeps on the timer or the queue, so it cannot starve them). Whether the priority was granted.
bool wake_on_time() {
  prctl(PR_SET_TIMERSLACK, 1UL);
  sched_param prio{};
  prio.sched_priority = 10;
  return sched_setscheduler(0, SCHED_FIFO, &prio) == 0;
}

// Hands every packet the socket holds now to on_packet, counting what the kernel dropped.
void drain(int fd, nfq_handle* h, State& s) {
  alignas(8) static char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      nfq_handle_packet(h, buf, static_cast<int>(n));
      continue;
    }
    if (n < 0 && errno == ENOBUFS) {
      ++s.lost;
      continue;
    }
    break;
  }
}

// The timer fired: learn how late it woke, to arm the next one that much early.
void on_timer(int timer, State& s, std::int64_t now) {
  std::uint64_t expirations = 0;
  (void)!::read(timer, &expirations, sizeof expirations);
  if (s.armed_for > 0 && now >= s.armed_for)
    s.advance_ns = std::min((s.advance_ns * 7 + (now - s.armed_for)) / 8, s.advance_cap_ns);
}

// Packet ids rise in arrival order within a queue, so one batch verdict releases every packet of
// it that is due (a dropped one has had its verdict already).
void release_due(State& s, std::int64_t now, bool stats) {
  for (auto& q : s.queues) {
    std::uint32_t last = 0;
    bool due = false;
    while (!q->held.empty() && q->held.front().release_ns - s.advance_ns <= now) {
      last = q->held.front().id;
      if (stats) q->late_us.push_back(static_cast<std::int32_t>((now - q->held.front().release_ns) / 1000));
      due = true;
      q->held.pop_front();
    }
    if (due) nfq_set_verdict_batch(q->handle, last, NF_ACCEPT);
  }
}

// Silent when all went well; packets the kernel could not hand over are a fault of the emulation.
void report(State& s, const Options& o) {
  for (auto& q : s.queues) {
    if (o.stats && !q->late_us.empty()) {
      std::sort(q->late_us.begin(), q->late_us.end());
      const auto at = [&](double p) { return q->late_us[static_cast<std::size_t>(p * (q->late_us.size() - 1))]; };
      std::fprintf(stderr,
                   "sax-linkdelay: queue %ld: %zu packets, let go late by p1 %d us, p50 %d us, p99 %d us, max %d us "
                   "(timer armed %lld us early; %llu timed from the kernel's receive stamp; %llu dropped of %llu)\n",
                   q->num, q->late_us.size(), at(0.01), at(0.5), at(0.99), q->late_us.back(),
                   static_cast<long long>(s.advance_ns / 1000), static_cast<unsigned long long>(q->stamped),
                   static_cast<unsigned long long>(q->dropped), static_cast<unsigned long long>(q->packets));
    }
  }
  if (s.lost > 0)
    std::fprintf(stderr, "sax-linkdelay: %llu packets lost before reaching the queues\n",
                 static_cast<unsigned long long>(s.lost));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  State s;
  s.ns_per_byte = o.rate_gbps > 0 ? 1.0 / o.rate_gbps : 0.0;  // GB/s = bytes per ns
  s.rng.seed(o.seeded ? o.seed : std::random_device{}());
  double shortest = 1e300;
  for (const auto& q : o.queues) {
    auto queue = std::make_unique<Queue>();
    queue->state = &s;
    queue->num = q.num, queue->delay_us = q.delay_us, queue->jitter_us = q.jitter_us, queue->loss = q.loss;
    s.queues.push_back(std::move(queue));
    shortest = std::min(shortest, q.delay_us);
  }
  s.advance_cap_ns = static_cast<std::int64_t>(shortest * 1000.0 / 4);
  if (!o.clocks.empty()) {
    // The file the launcher made (root's, in its private directory): the buildings' uplink
    // clocks, out then in, then each building's block of NIC-out clocks.
    const std::size_t slots = (2 + static_cast<std::size_t>(o.block)) * o.device_gbps.size();
    const int cfd = ::open(o.clocks.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    struct stat st {};
    if (cfd < 0 || ::fstat(cfd, &st) != 0 || static_cast<std::size_t>(st.st_size) < slots * sizeof(std::int64_t))
      die("--clocks " + o.clocks + ": expected the testbed's clock file of at least " +
          std::to_string(slots * sizeof(std::int64_t)) + " bytes");
    void* map = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
    ::close(cfd);
    if (map == MAP_FAILED) die("--clocks " + o.clocks + ": mmap: " + std::strerror(errno));
    static_assert(sizeof(std::atomic<std::int64_t>) == sizeof(std::int64_t) &&
                  std::atomic<std::int64_t>::is_always_lock_free);
    s.clocks = static_cast<std::atomic<std::int64_t>*>(map);
    s.building = o.building, s.block = o.block;
    for (std::size_t j = 0; j < o.device_gbps.size(); ++j) {
      s.device_ns_per_byte.push_back(1.0 / o.device_gbps[j]);
      s.uplink_ns_per_byte.push_back(1.0 / o.uplink_gbps[j]);
    }
  }
  nfq_handle* h = open_queues(s);
  const int fd = nfq_fd(h);
  const int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer < 0) die(std::string("timerfd_create: ") + std::strerror(errno));
  const bool realtime = wake_on_time();

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::printf("ready%s\n", realtime ? "" : " (no real-time priority: latency may stretch when cores are busy)");
  std::fflush(stdout);

  pollfd fds[2] = {{fd, POLLIN, 0}, {timer, POLLIN, 0}};
  while (!g_stop) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      die(std::string("poll: ") + std::strerror(errno));
    }
    if (fds[0].revents & POLLIN) drain(fd, h, s);  // what is there, then back to waiting
    const std::int64_t now = now_ns();
    if (fds[1].revents & POLLIN) on_timer(timer, s, now);
    release_due(s, now, o.stats);
    arm(timer, s);
  }
  // Whatever is still held goes through at once: teardown must not strand a connection.
  for (auto& q : s.queues)
    if (!q->held.empty()) nfq_set_verdict_batch(q->handle, q->held.back().id, NF_ACCEPT);
  report(s, o);
  for (auto& q : s.queues) nfq_destroy_queue(q->handle);
  nfq_close(h);
  ::close(timer);
  return 0;
}
