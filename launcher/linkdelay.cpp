// sax-linkdelay: holds every packet of one NFQUEUE queue for a fixed delay, then lets it through —
// the one-way latency of an emulated building boundary where the kernel has no netem
// (../shared/TESTBED.md "Kernel traffic shaping"). `sax launch --emulate netns` starts one inside
// each building's network namespace, on a queue that an iptables rule in that namespace's
// PREROUTING chain fills with the packets arriving from other buildings.
//
//   sax-linkdelay --queue N --delay-us D [--stats]
//
// --stats: at the end, how late the packets were let go (percentiles, µs after their time).
//
// Packets leave in arrival order, each D µs after it arrived (TCP's large segments are held whole,
// and one batch verdict releases all that are due). The program waits on a timer
// (timerfd, absolute CLOCK_MONOTONIC) set to the head packet's release time, never spinning: on a
// host with fewer cores than ranks a busy-waiting holder steals the CPU the ranks need. It prints
// "ready" once the queue is bound (the launcher waits for that line before starting ranks) and
// on SIGTERM/SIGINT lets what it holds go and ends, saying so only if the kernel dropped packets
// before they reached it.
#include <arpa/inet.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

struct Held {
  std::uint32_t id;
  std::int64_t release_ns;
};

struct State {
  nfq_q_handle* queue = nullptr;
  std::deque<Held> held;
  std::int64_t delay_ns = 0;
  std::uint64_t packets = 0;
  std::uint64_t lost = 0;             // the netlink socket overflowed: packets the kernel could not hand over
  std::uint64_t stamped = 0;          // packets whose kernel receive time was known
  std::vector<std::int32_t> late_us;  // --stats: how late each packet was let go (µs after its time)
  // How late the timer wakes the helper (a moving average): the timer is armed that much early,
  // so that packets go on time on average rather than always late by the host's wake-up time
  // (tens of µs on a VM even at real-time priority). At most a quarter of the delay.
  std::int64_t advance_ns = 0;
  std::int64_t armed_for = -1;  // when the armed timer should fire (-1: not armed)
};

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

std::int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

int on_packet(nfq_q_handle*, nfgenmsg*, nfq_data* data, void* arg) {
  auto* s = static_cast<State*>(arg);
  const nfqnl_msg_packet_hdr* h = nfq_get_msg_packet_hdr(data);
  if (h == nullptr) return 0;
  // The delay counts from the packet's arrival in the namespace (the kernel's receive timestamp),
  // not from the moment this process woke up to read it: the wake-up is not part of the link.
  std::int64_t arrived = now_ns();
  timeval tv{};
  if (nfq_get_timestamp(data, &tv) == 0 && tv.tv_sec > 0) {
    timespec real{};
    clock_gettime(CLOCK_REALTIME, &real);
    const std::int64_t age = (static_cast<std::int64_t>(real.tv_sec) - tv.tv_sec) * 1000000000 +
                             (real.tv_nsec - static_cast<std::int64_t>(tv.tv_usec) * 1000);
    if (age > 0 && age < s->delay_ns) arrived -= age, ++s->stamped;
  }
  s->held.push_back({ntohl(h->packet_id), arrived + s->delay_ns});
  ++s->packets;
  return 0;
}

void arm(int timer, State& s) {
  itimerspec when{};
  s.armed_for = -1;
  if (!s.held.empty()) {
    const std::int64_t t = std::max<std::int64_t>(1, s.held.front().release_ns - s.advance_ns);
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

struct Options {
  long queue_num = -1;
  double delay_us = -1;
  bool stats = false;
};

Options parse_options(int argc, char** argv) {
  Options o;
  if (argc == 6 && std::string(argv[5]) == "--stats") o.stats = true, --argc;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    char* end = nullptr;
    if (k == "--queue")
      o.queue_num = std::strtol(argv[i + 1], &end, 10);
    else if (k == "--delay-us")
      o.delay_us = std::strtod(argv[i + 1], &end);
    else
      die("unknown option '" + k + "' (usage: sax-linkdelay --queue N --delay-us D)");
    if (end == argv[i + 1] || *end != '\0') die(k + ": expected a number, got '" + argv[i + 1] + "'");
  }
  if (argc != 5 || o.queue_num < 0 || o.queue_num > 65535 || !(o.delay_us >= 0) || o.delay_us > 10e6)
    die("usage: sax-linkdelay --queue N (0-65535) --delay-us D (0-10000000)");
  return o;
}

// Binds queue `queue_num` to s (on_packet receives its packets) and returns the library handle.
nfq_handle* open_queue(long queue_num, State& s) {
  nfq_handle* h = nfq_open();
  if (h == nullptr) die(std::string("nfq_open: ") + std::strerror(errno) + " (needs root in the namespace)");
  nfq_unbind_pf(h, AF_INET);  // older kernels want a fresh binding; failure is harmless
  if (nfq_bind_pf(h, AF_INET) < 0) die(std::string("nfq_bind_pf: ") + std::strerror(errno));
  s.queue = nfq_create_queue(h, static_cast<std::uint16_t>(queue_num), &on_packet, &s);
  if (s.queue == nullptr) die("nfq_create_queue " + std::to_string(queue_num) + ": " + std::strerror(errno));
  // Only the verdict is needed, not the payload: copy the metadata and no packet bytes, and take
  // TCP's large segments whole (without F_GSO the kernel cuts each into MTU-sized packets first).
  if (nfq_set_mode(s.queue, NFQNL_COPY_PACKET, 0) < 0) die(std::string("nfq_set_mode: ") + std::strerror(errno));
  nfq_set_queue_flags(s.queue, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);
  // Room for every packet in flight on the link during the delay (the kernel's default is 1024).
  nfq_set_queue_maxlen(s.queue, 1 << 16);
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
    s.advance_ns = std::min((s.advance_ns * 7 + (now - s.armed_for)) / 8, s.delay_ns / 4);
}

// Packet ids rise in arrival order, so one batch verdict releases every packet that is due.
void release_due(State& s, std::int64_t now, bool stats) {
  std::uint32_t last = 0;
  bool due = false;
  while (!s.held.empty() && s.held.front().release_ns - s.advance_ns <= now) {
    last = s.held.front().id;
    if (stats) s.late_us.push_back(static_cast<std::int32_t>((now - s.held.front().release_ns) / 1000));
    due = true;
    s.held.pop_front();
  }
  if (due) nfq_set_verdict_batch(s.queue, last, NF_ACCEPT);
}

// Silent when all went well; packets the kernel could not hand over are a fault of the emulation.
void report(State& s, const Options& o) {
  if (o.stats && !s.late_us.empty()) {
    std::sort(s.late_us.begin(), s.late_us.end());
    const auto at = [&](double q) { return s.late_us[static_cast<std::size_t>(q * (s.late_us.size() - 1))]; };
    std::fprintf(stderr,
                 "sax-linkdelay: queue %ld: %zu packets, let go late by p1 %d us, p50 %d us, p99 %d us, max %d us "
                 "(timer armed %lld us early; %llu timed from the kernel's receive stamp)\n",
                 o.queue_num, s.late_us.size(), at(0.01), at(0.5), at(0.99), s.late_us.back(),
                 static_cast<long long>(s.advance_ns / 1000), static_cast<unsigned long long>(s.stamped));
  }
  if (s.lost > 0)
    std::fprintf(stderr, "sax-linkdelay: queue %ld: %llu packets held %.0f us, %llu lost before reaching the queue\n",
                 o.queue_num, static_cast<unsigned long long>(s.packets), o.delay_us,
                 static_cast<unsigned long long>(s.lost));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  State s;
  s.delay_ns = static_cast<std::int64_t>(o.delay_us * 1000.0);
  nfq_handle* h = open_queue(o.queue_num, s);
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
  if (!s.held.empty()) nfq_set_verdict_batch(s.queue, s.held.back().id, NF_ACCEPT);
  report(s, o);
  nfq_destroy_queue(s.queue);
  nfq_close(h);
  ::close(timer);
  return 0;
}
