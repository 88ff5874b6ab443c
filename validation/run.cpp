#include "validation/run.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "explorer/search.hpp"
#include "harness/stats.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"
#include "validation/text.hpp"

namespace sax::validation {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Runs `plan`'s command with its output in `log` (the testbed's tables stay out of validate's).
// While a run lasts, a line every kHeartbeat to the terminal validate prints to: a layout can run
// for minutes, and a silent screen is not told from a hung one.
constexpr auto kHeartbeat = std::chrono::seconds(15);

// Calls `line(seconds so far)` every kHeartbeat until destroyed, writing what it returns to `fd`.
class Heartbeat {
 public:
  Heartbeat(int fd, std::function<std::string(double)> line) : fd_(fd), line_(std::move(line)) {
    if (fd_ >= 0 && line_) thread_ = std::thread([this] { loop(); });
  }
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(m_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    const auto start = Clock::now();
    std::unique_lock<std::mutex> lock(m_);
    while (!cv_.wait_for(lock, kHeartbeat, [this] { return done_; })) {
      const std::string s = line_(std::chrono::duration<double>(Clock::now() - start).count());
      if (::write(fd_, s.data(), s.size()) < 0) return;
    }
  }
  int fd_;
  std::function<std::string(double)> line_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

int run_quietly(const launcher::LaunchPlan& plan, const fs::path& log, const std::function<std::string()>& broken,
                const std::function<std::string(double)>& heartbeat) {
  std::fflush(stdout);
  std::fflush(stderr);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw RunError("validate: cannot write " + log.string());
  // This process's stdout and stderr go to the log while the command runs, and come back however
  // it ends.
  struct Redirect {
    int out = ::dup(1), err = ::dup(2);
    explicit Redirect(int to) {
      ::dup2(to, 1);
      ::dup2(to, 2);
    }
    ~Redirect() {
      ::dup2(out, 1);
      ::dup2(err, 2);
      ::close(out);
      ::close(err);
    }
  } redirect(fd);
  ::close(fd);
  const Heartbeat beat(redirect.out, heartbeat);
  return launcher::run_plan(plan, broken);
}

std::string tail_of(const fs::path& file, std::size_t lines) {
  std::ifstream in(file);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  std::string s;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) s += "    " + all[i] + "\n";
  return s;
}

// Adds one round's `sax run` JSON: its measured steps, and each part's mean over the ranks of the
// stage the prediction's breakdown is of (its critical stage: the one whose step ends last), so
// that a pipeline's parts are set beside the same stage's (every rank where no rank has it).
void add_run(Trial& t, const fs::path& file) {
  const json r = load_json_file(file.string());
  for (const json& s : r.at("steps")) t.steps.push_back(s.get<double>());
  std::vector<const json*> ranks;
  for (const json& rank : r.at("ranks"))
    if (rank.at("stage").get<std::int64_t>() == t.predicted.critical_stage) ranks.push_back(&rank);
  if (ranks.empty())
    for (const json& rank : r.at("ranks")) ranks.push_back(&rank);
  const auto n = static_cast<double>(ranks.size());
  for (const json* rank : ranks) {
    const json& b = rank->at("breakdown_s");
    for (std::size_t i = 0; i < metrics::kParts.size(); ++i)
      t.measured[i] += b.at(metrics::kParts[i]).get<double>() / n;
    t.other_s += b.at("other").get<double>() / n;
  }
  if (const auto it = r.find("pacing"); it != r.end()) {
    Pacing& p = t.pacing ? *t.pacing : t.pacing.emplace();
    p.ops += it->at("ops").get<std::int64_t>();
    p.overruns += it->at("overruns").get<std::int64_t>();
    p.overrun_s += it->at("overrun_s").get<double>();
    p.compute_s += it->at("compute_s").get<double>();
    p.load_p99 = std::max(p.load_p99, it->at("load_p99_max").get<double>());
  }
  ++t.rounds;
}

// After the last round: the step's median, min and max over every step measured, and each part's
// mean over the rounds.
void finish(Trial& t) {
  t.median_s = harness::median(t.steps);
  const auto [lo, hi] = std::minmax_element(t.steps.begin(), t.steps.end());
  t.min_s = *lo;
  t.max_s = *hi;
  for (double& x : t.measured) x /= t.rounds;
  t.other_s /= t.rounds;
}

// `sax run` of the trial's layout for one round; the first round also records the trace.
std::vector<std::string> run_command(const Options& o, const Trial& t, const std::string& suffix, bool trace) {
  std::vector<std::string> cmd = {"run",
                                  "--cluster",
                                  fs::absolute(o.cluster).string(),
                                  "--model",
                                  fs::absolute(o.model).string(),
                                  "--layout",
                                  (t.dir / "layout.json").string(),
                                  "--steps",
                                  std::to_string(o.steps),
                                  "--warmup",
                                  std::to_string(o.warmup),
                                  "--timeout",
                                  printf_text("%g", o.timeout_s),
                                  "--json",
                                  (t.dir / ("run" + suffix + ".json")).string()};
  if (trace) cmd.insert(cmd.end(), {"--trace", (t.dir / "trace").string()});
  if (t.router_imbalance > 0) cmd.insert(cmd.end(), {"--router-imbalance", printf_text("%.17g", t.router_imbalance)});
  if (o.lengths != "fixed") cmd.insert(cmd.end(), {"--lengths", o.lengths, "--balance", o.balance});
  return cmd;
}

// Where the loop stands, for the progress lines: runs done of all, since when; before the first
// has ended, the least the runs can take (their predicted steps, warm-up included).
struct Progress {
  std::size_t done = 0, total = 0;
  double steps_s = 0;
  Clock::time_point start = Clock::now();
};

// One run's predicted steps, warm-up included: what no start-up can make shorter.
double steps_s(const Options& o, const Trial& t) {
  return static_cast<double>(o.steps + o.warmup) * t.predicted.step_time_s;
}

std::string progress_line(const Progress& p, int round, int rounds, const Trial& t) {
  const double elapsed = std::chrono::duration<double>(Clock::now() - p.start).count();
  const std::string eta =
      p.done == 0
          ? ", ETA at least " + printf_text("%.0f", p.steps_s) + " s (the predicted steps alone; start-up adds more)"
          : ", " + printf_text("%.0f", elapsed) + " s elapsed, ETA " +
                printf_text("%.0f", elapsed / static_cast<double>(p.done) * static_cast<double>(p.total - p.done)) +
                " s";
  const std::string round_text = rounds > 1 ? printf_text("round %.0f ", round + 1.0) : "";
  return printf_text("  [%zu/%zu] %s%-6s %-40s predicted %s s%s\n", p.done + 1, p.total, round_text.c_str(),
                     t.label.c_str(), explorer::describe_degrees(t.candidate).c_str(),
                     seconds_text(t.predicted.step_time_s).c_str(), eta.c_str());
}

// One round of one trial: launched, its output in run[-R].log, its results added when it ran.
void run_round(const RunInput& in, launcher::LaunchOptions& lo, Trial& t, int round) {
  const std::string suffix = round == 0 ? "" : "-" + std::to_string(round + 1);
  lo.command = run_command(in.options, t, suffix, round == 0);
  const launcher::LaunchPlan p = launcher::plan_launch(in.cluster, in.options.cluster, lo);
  const fs::path log = t.dir / ("run" + suffix + ".log");
  // The heartbeat goes where validate's own lines go: the terminal, when that is std::cout.
  const double predicted = steps_s(in.options, t);
  auto beat = [predicted](double s) {
    return printf_text(
        "         ... %.0f s into this run (its steps are predicted at %.0f s; start-up takes the rest)\n", s,
        predicted);
  };
  t.exit_code = run_quietly(p, log, in.broken, &in.out == &std::cout ? beat : std::function<std::string(double)>());
  if (launcher::InterruptGuard::interrupted()) throw RunError("validate: interrupted");
  if (t.ran()) {
    add_run(t, t.dir / ("run" + suffix + ".json"));
  } else {
    in.out << "         failed (exit " << t.exit_code << "); the end of " << log.string() << ":\n"
           << tail_of(log, 5) << std::flush;
  }
}

}  // namespace

FolderLock::FolderLock(const fs::path& dir, const std::string& flag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path file = dir / ".sax-validate.lock";
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) throw UsageError("validate " + flag + " " + dir.string() + ": cannot open " + file.string());
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw UsageError("validate " + flag + " " + dir.string() +
                     ": expected a folder no other validate is using (another one holds " + file.string() +
                     "); give each its own");
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);
}

RunsDir::RunsDir(const std::string& keep) : path_(keep) {
  if (path_.empty()) {
    std::string t = (fs::temp_directory_path() / "sax-validate-XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) throw RunError("validate: cannot make a temporary folder in /tmp");
    path_ = t;
    temporary_ = true;
  }
  path_ = fs::absolute(path_);
  if (temporary_) return;
  lock_ = std::make_unique<FolderLock>(path_, "--runs");
  // An earlier validate's runs (N-name/ folders holding its layout.json) go: what is left there
  // afterwards is this one's alone.
  for (const auto& e : fs::directory_iterator(path_)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && !e.is_symlink() && !name.empty() && std::isdigit(static_cast<unsigned char>(name[0])) &&
        name.find('-') != std::string::npos && fs::exists(e.path() / "layout.json"))
      fs::remove_all(e.path());
  }
}

RunsDir::~RunsDir() {
  std::error_code ec;
  if (temporary_) fs::remove_all(path_, ec);
}

void run_trials(const RunInput& in, std::vector<Trial>& trials) {
  for (std::size_t i = 0; i < trials.size(); ++i) {
    Trial& t = trials[i];
    t.dir = in.runs / (std::to_string(i + 1) + "-" + (t.rank ? "rank" + std::to_string(*t.rank) : t.label));
    fs::create_directories(t.dir);
    in.write_json((t.dir / "layout.json").string(), to_json(t.layout));
  }
  // Round r runs the layouts forward when r is even, backward when odd: a machine that drifts
  // (the CPU testbed's timings do, by 10-30 % over minutes) weighs on every layout alike.
  launcher::LaunchOptions lo = in.launch;
  Progress progress;
  progress.total = trials.size() * static_cast<std::size_t>(in.options.rounds);
  for (const Trial& t : trials) progress.steps_s += in.options.rounds * steps_s(in.options, t);
  for (int round = 0; round < in.options.rounds; ++round)
    for (std::size_t k = 0; k < trials.size(); ++k, ++progress.done) {
      Trial& t = trials[round % 2 == 0 ? k : trials.size() - 1 - k];
      if (round > 0 && !t.ran()) continue;  // failed once: not again
      in.out << progress_line(progress, round, in.options.rounds, t) << std::flush;
      run_round(in, lo, t, round);
    }
  for (Trial& t : trials)
    if (t.ran()) finish(t);
}

}  // namespace sax::validation
