// Recovery from failures, measured on real clusters: for each kind of churn (a worker killed,
// stopped, told to leave; a worker joining; a server killed with --replicas=2; a server killed and
// replaced, rolling back to a checkpoint; the scheduler killed and restarted), how long the job takes
// to notice, how long until it trains at full speed again, and how many steps a worker computed twice.
//
// Each run starts a fresh cluster (1 scheduler, 2 servers, 3 workers; every role its own process
// on 127.0.0.1, output to files in a temporary folder), lets it train for about 1.3 s, injects
// the failure (into the same launch slot every time) and polls the scheduler every 20 ms. Prints
// a Markdown table: median [min-max] over --runs runs per scenario.
//
//   detect           injection -> GetClusterView shows a higher membership epoch. Scheduler killed
//                    and restarted (no membership change): injection -> the first GetJobStatus the
//                    restarted scheduler answers (polled through a fresh channel while it is away)
//   full speed       injection -> end of the first 300 ms window, wholly after the injection, whose
//                    step rate is >= 90% of the rate in the second before the injection
//   steps redone     max over the surviving workers of, per worker, the distinct steps N in its
//                    "step N: membership epoch A -> B" log lines (worker/trainer.cc; each is a step
//                    aborted by the change and computed again under the new view) plus A - B for
//                    each "rewinding from step A to step B" line after the injection (steps the
//                    servers applied and then rolled back to a checkpoint: computed again too).
//                    A server replaced after a rollback thus counts A - B + 1
//   repeats skipped  ASYNC: pushes server 0 answered "already applied; skipped" after the injection
//                    (batches of the dead worker's lease done again, or a re-push after an abort)
//
// Killed and replaced: right after the SIGKILL (once the process is reaped) a new process of the
// same binary with the same flags is started: a server takes the dead rank once the scheduler has
// freed it (it retries until then); the scheduler, started with --state_dir, restores its state and
// listens on the port it had, and the roles reconnect. Polling goes on for 2 s after the detection
// and, for a server, after the view announces the rollback (which takes a replacement).
//
// Step rates come from server 0's log, not from JobStatus.step: workers report progress every
// 500 ms and at every epoch end, so JobStatus.step moves in jumps of a whole epoch here (125 steps,
// about every half second), too coarse for a 300 ms window. Servers run with --vmodule so that they
// log each applied step (SYNC) or push (ASYNC) with glog's microsecond time stamp. A step applied
// again after a rollback counts again: the rate is the work done, not the progress made (the
// progress lost is "steps redone").
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/binary_init.h"
#include "scheduler/client/scheduler_client.h"
#include "common/status_macros.h"
#include "launch/child_process.h"

DEFINE_string(bin_dir, "", "Folder with pstrain-scheduler, -server and -worker (default: this binary's own)");
DEFINE_int32(runs, 3, "Runs per scenario");
DEFINE_string(scenarios,
              "kill,term,stop,join,async_kill,server_kill,server_restore,async_server_restore,scheduler_kill,"
              "async_scheduler_kill",
              "Comma-separated scenarios to run, in order");
DEFINE_string(data_dir, "", "Passed to the scheduler when set (default: the job's default data set)");
DEFINE_bool(keep_logs, false, "Keep the roles' logs and a trace.csv of the polls per run; prints the folder");

namespace pstrain::bench {
namespace {

using launch::ChildProcess;

constexpr absl::Duration kPoll = absl::Milliseconds(20);
constexpr absl::Duration kSteady = absl::Seconds(1);         // Baseline window before the injection.
constexpr absl::Duration kWarmUp = absl::Milliseconds(300);  // Training before the baseline window.
constexpr absl::Duration kWindow = absl::Milliseconds(300);  // Sliding window after it.
constexpr double kFullSpeed = 0.9;
constexpr absl::Duration kStopFor = absl::Seconds(3);  // SIGSTOP scenario.
constexpr absl::Duration kGiveUp = absl::Seconds(10);  // After the injection.
constexpr absl::Duration kObserve = absl::Seconds(2);  // After the detection (and SIGCONT).
constexpr int kServers = 2;
constexpr int kWorkers = 3;

// kRestart: SIGKILL, then a new process of the victim's binary with the victim's flags.
enum class Fault { kKill, kTerm, kStop, kJoin, kRestart };

constexpr int kCheckpointEverySteps = 50;  // server_restore, async_server_restore.

struct Scenario {
  std::string name;   // For --scenarios.
  std::string title;  // For the table.
  std::string mode;   // --mode of the job.
  Fault fault;
  std::string victim = "worker1";           // Launch slot the fault hits (kJoin: none).
  std::vector<std::string> job_flags = {};  // Added to the scheduler's; "{dir}" stands for the run's folder.
};

const std::vector<Scenario>& AllScenarios() {
  static const auto* all = new std::vector<Scenario>{
      {"kill", "sync: kill -9 one worker", "sync", Fault::kKill},
      {"term", "sync: SIGTERM one worker", "sync", Fault::kTerm},
      {"stop", "sync: SIGSTOP one worker 3 s, then SIGCONT", "sync", Fault::kStop},
      {"join", "sync: a 4th worker joins", "sync", Fault::kJoin},
      {"async_kill", "async: kill -9 one worker", "async", Fault::kKill},
      {"server_kill", "sync, --replicas=2: kill -9 one server", "sync", Fault::kKill, "server1", {"--replicas=2"}},
      {"server_restore",
       absl::StrCat("sync, checkpoint every ", kCheckpointEverySteps,
                    " steps: kill -9 one server, start a replacement (all roll back)"),
       "sync",
       Fault::kRestart,
       "server1",
       {"--checkpoint_dir={dir}/checkpoints", absl::StrCat("--checkpoint_every_steps=", kCheckpointEverySteps),
        "--server_recovery_timeout_ms=30000"}},
      {"async_server_restore",
       absl::StrCat("async, checkpoint every ", kCheckpointEverySteps,
                    " updates: kill -9 one server, start a replacement (it alone restores)"),
       "async",
       Fault::kRestart,
       "server1",
       {"--checkpoint_dir={dir}/checkpoints", absl::StrCat("--checkpoint_every_steps=", kCheckpointEverySteps),
        "--server_recovery_timeout_ms=30000"}},
      {"scheduler_kill",
       "sync, --state_dir: kill -9 the scheduler, restart it",
       "sync",
       Fault::kRestart,
       "scheduler",
       {"--state_dir={dir}/state"}},
      {"async_scheduler_kill",
       "async, --state_dir: kill -9 the scheduler, restart it",
       "async",
       Fault::kRestart,
       "scheduler",
       {"--state_dir={dir}/state"}},
  };
  return *all;
}

// What one run measured; a figure is missing when it did not happen within kGiveUp.
struct Result {
  std::optional<double> detect_s;
  std::optional<double> full_speed_s;
  std::optional<int> redone;
  int skipped = 0;  // ASYNC: pushes server 0 skipped as repeats after the injection.
  double steps_per_s_before = 0;
  double steps_per_s_after = 0;  // Over the last second observed.
};

struct Sample {
  absl::Time at;
  int64_t step = 0;
  int64_t membership_epoch = 0;
  int live_workers = 0;
  int64_t restore_epoch = -1;  // The view's restore_epoch; -1 without a restore_step.
};

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// One cluster of real processes, each writing its stdout and stderr to DIR/NAME.log. Destroying
// it kills whatever still runs (~ChildProcess).
class Cluster {
 public:
  // `data_dir` may be empty (the job's default).
  Cluster(std::string bin_dir, std::string dir, std::string data_dir)
      : bin_dir_(std::move(bin_dir)), dir_(std::move(dir)), data_dir_(std::move(data_dir)) {}

  // Starts the scheduler and waits for its port; then the servers and workers.
  absl::Status Start(const std::string& mode, const std::vector<std::string>& job_flags) {
    std::vector<std::string> args = {absl::StrCat("--servers=", kServers),
                                     absl::StrCat("--workers=", kWorkers),
                                     "--mode=" + mode,
                                     "--epochs=30",
                                     "--train_limit=12000",
                                     "--test_limit=1000",
                                     "--batch_size=32",
                                     "--eval_last_epoch_only",
                                     "--heartbeat_ms=200",
                                     "--dead_after_ms=1000",
                                     "--port=0",
                                     "--port_file=" + dir_ + "/port",
                                     "--summary_json=" + dir_ + "/summary.json"};
    if (!data_dir_.empty()) args.push_back("--data_dir=" + data_dir_);
    for (const std::string& flag : job_flags) args.push_back(absl::StrReplaceAll(flag, {{"{dir}", dir_}}));
    RETURN_IF_ERROR(Spawn("scheduler", "pstrain-scheduler", args));
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    int port = 0;
    while (port == 0) {
      std::ifstream in(dir_ + "/port");
      std::string text;
      if (in >> text && absl::SimpleAtoi(text, &port) && port > 0) break;
      if (children_["scheduler"]->Poll().has_value() || absl::Now() > give_up) {
        return absl::UnavailableError("the scheduler did not start; see " + dir_ + "/scheduler.log");
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    address_ = absl::StrCat("127.0.0.1:", port);
    for (int s = 0; s < kServers; ++s) {
      // Logs every applied step (SYNC) or push (ASYNC): StepEvents reads them.
      RETURN_IF_ERROR(Spawn(absl::StrCat("server", s), "pstrain-server",
                            {"--scheduler=" + address_, mode == "sync" ? "--vmodule=parameter_store_steps=1"
                                                                       : "--vmodule=parameter_store_steps=2"}));
    }
    for (int w = 0; w < kWorkers; ++w) RETURN_IF_ERROR(AddWorker());
    return absl::OkStatus();
  }

  // Starts one more worker, named "workerN" in launch order.
  absl::Status AddWorker() {
    return Spawn(absl::StrCat("worker", workers_++), "pstrain-worker", {"--scheduler=" + address_});
  }

  // Kills `name` (SIGKILL), reaps it, and starts a new process of the same binary with the same
  // flags, logging to NAME-restart.log. A restarted scheduler finds its port in its state.
  absl::Status KillAndRestart(const std::string& name) {
    RETURN_IF_ERROR(child(name)->Signal(SIGKILL));
    child(name)->Wait();  // Its port is free only once it is gone.
    const Launch launch = launches_.at(name);
    return Spawn(name + "-restart", launch.binary, launch.args);
  }

  const std::string& address() const { return address_; }
  ChildProcess* child(const std::string& name) { return children_.at(name).get(); }
  std::string log(const std::string& name) const { return dir_ + "/" + name + ".log"; }

 private:
  // Through the shell only for the redirection; exec keeps the pid, so signals reach the role.
  absl::Status Spawn(const std::string& name, const std::string& binary, const std::vector<std::string>& args) {
    // glog stamps lines in local time; UTC makes them comparable with absl::Now() (StepEvents).
    std::string command = "TZ=UTC0; export TZ; exec " + ShellQuote(bin_dir_ + "/" + binary);
    for (const std::string& a : args) absl::StrAppend(&command, " ", ShellQuote(a));
    absl::StrAppend(&command, " > ", ShellQuote(log(name)), " 2>&1");
    ASSIGN_OR_RETURN(children_[name], ChildProcess::Spawn({{"/bin/sh", "-c", command}}));
    launches_[name] = {binary, args};
    return absl::OkStatus();
  }

  struct Launch {
    std::string binary;
    std::vector<std::string> args;
  };

  const std::string bin_dir_;
  const std::string dir_;
  const std::string data_dir_;
  std::string address_;
  int workers_ = 0;
  std::map<std::string, std::unique_ptr<ChildProcess>> children_;
  std::map<std::string, Launch> launches_;  // By name, for KillAndRestart.
};

// One optimizer step seen in a server's log: +1 for an applied step (SYNC) or an applied push
// (ASYNC), -1 for a push skipped as a repeat (logged before its "push ... : OK" line).
struct StepEvent {
  absl::Time at;
  int weight = 1;
};

// When a glog line was written, from its prefix ("I20261122 11:54:40.740993 ..."; the roles run
// with TZ=UTC0); nothing for a line without one.
std::optional<absl::Time> LogTime(const std::string& line) {
  absl::Time at;
  // absl's %Y takes every digit, so the date gets separators first.
  if (line.size() < 25 ||
      !absl::ParseTime("%Y-%m-%d %H:%M:%E*S",
                       absl::StrCat(line.substr(1, 4), "-", line.substr(5, 2), "-", line.substr(7, 18)),
                       absl::UTCTimeZone(), &at, nullptr)) {
    return std::nullopt;
  }
  return at;
}

// The step events of a server log written with the --vmodule of Cluster::Start.
// SYNC: each step counts once, however many stores of the server applied it (with --replicas=2 a
// server holds two shards, and the surviving server0 may hold either rank); after a rollback to
// step K ("rolled back to step K", or "restored step K" on a replacement), steps from K on count
// again when they are applied again.
std::vector<StepEvent> StepEvents(const std::string& path, bool sync) {
  static const std::regex kApplied(R"(: applied step (\d+) )");
  static const std::regex kRolledBack(R"(: (?:rolled back to|restored) step (\d+))");
  std::set<int64_t> applied;
  std::smatch m;
  std::vector<StepEvent> events;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    int weight = 0;
    if (sync && std::regex_search(line, m, kRolledBack)) {
      applied.erase(applied.lower_bound(std::stoll(m[1])), applied.end());
    } else if (sync ? std::regex_search(line, m, kApplied) && applied.insert(std::stoll(m[1])).second
                    : absl::StrContains(line, ": push from worker ") && absl::EndsWith(line, ": OK")) {
      weight = 1;
    } else if (!sync && absl::EndsWith(line, "is already applied; skipped")) {
      weight = -1;
    }
    if (weight == 0) continue;
    if (std::optional<absl::Time> at = LogTime(line)) events.push_back({*at, weight});
  }
  return events;
}

// Steps per second in (from, to].
double Rate(const std::vector<StepEvent>& events, absl::Time from, absl::Time to) {
  int64_t steps = 0;
  for (const StepEvent& e : events) {
    if (e.at > from && e.at <= to) steps += e.weight;
  }
  return steps / absl::ToDoubleSeconds(to - from);
}

// The steps a worker computed again (see "steps redone" at the top): the distinct steps N in its
// log's "step N: membership epoch A -> B" lines with A >= `epoch`, plus A - B for each "rewinding
// from step A to step B" line written at or after `since`.
int RedoneSteps(const std::string& path, int64_t epoch, absl::Time since) {
  static const std::regex kAborted(R"(step (\d+): membership epoch (\d+) -> (\d+))");
  static const std::regex kRewound(R"(rewinding from step (\d+) to step (\d+))");
  std::ifstream in(path);
  std::set<int64_t> aborted;
  int64_t rewound = 0;
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, m, kAborted) && std::stoll(m[2]) >= epoch) {
      aborted.insert(std::stoll(m[1]));
    } else if (std::regex_search(line, m, kRewound)) {
      const std::optional<absl::Time> at = LogTime(line);
      if (at && *at >= since) rewound += std::stoll(m[1]) - std::stoll(m[2]);
    }
  }
  return static_cast<int>(aborted.size() + rewound);
}

absl::StatusOr<Sample> Poll(SchedulerClient& client) {
  ASSIGN_OR_RETURN(JobStatus status, client.GetJobStatus());
  ASSIGN_OR_RETURN(ClusterView view, client.GetClusterView());
  if (status.state() == FAILED) return absl::AbortedError("job failed: " + status.failure());
  return Sample{absl::Now(), status.step(), view.membership_epoch(), view.workers_size(),
                view.has_restore_step() ? view.restore_epoch() : -1};
}

// Runs `scenario` once in the empty folder `dir`; with `keep_trace`, leaves trace.csv (the polls)
// and steps.csv (server 0's step events) there beside the logs.
absl::StatusOr<Result> RunOnce(const Scenario& scenario, const std::string& bin_dir, const std::string& data_dir,
                               const std::string& dir, bool keep_trace) {
  Cluster cluster(bin_dir, dir, data_dir);
  RETURN_IF_ERROR(cluster.Start(scenario.mode, scenario.job_flags));
  ASSIGN_OR_RETURN(std::unique_ptr<SchedulerClient> client,
                   SchedulerClient::Create(cluster.address(), absl::Seconds(2)));
  std::vector<Sample> samples;
  // Training has started once a worker reported a step.
  const absl::Time startup_limit = absl::Now() + absl::Seconds(60);
  while (samples.empty() || samples.back().step == 0) {
    if (absl::Now() > startup_limit) return absl::DeadlineExceededError("no step within 60 s of start-up");
    absl::StatusOr<Sample> s = Poll(*client);
    if (absl::IsAborted(s.status())) return s.status();  // The job failed.
    if (s.ok()) samples.push_back(*s);
    absl::SleepFor(kPoll);
  }
  const absl::Time inject_at = absl::Now() + kWarmUp + kSteady;
  while (absl::Now() < inject_at) {
    ASSIGN_OR_RETURN(Sample s, Poll(*client));
    samples.push_back(s);
    absl::SleepFor(kPoll);
  }

  const std::string& victim = scenario.victim;
  const absl::Time t0 = absl::Now();
  const int64_t epoch0 = samples.back().membership_epoch;
  switch (scenario.fault) {
    case Fault::kKill:
      RETURN_IF_ERROR(cluster.child(victim)->Signal(SIGKILL));
      break;
    case Fault::kTerm:
      RETURN_IF_ERROR(cluster.child(victim)->Signal(SIGTERM));
      break;
    case Fault::kStop:
      RETURN_IF_ERROR(cluster.child(victim)->Signal(SIGSTOP));
      break;
    case Fault::kJoin:
      RETURN_IF_ERROR(cluster.AddWorker());
      break;
    case Fault::kRestart:
      RETURN_IF_ERROR(cluster.KillAndRestart(victim));
      break;
  }
  // Without the scheduler nothing changes membership: detected is its first answer after the restart.
  const bool scheduler_restart = scenario.fault == Fault::kRestart && victim == "scheduler";
  // Poll until kObserve after both the detection and the victim's return: the SIGCONT (SIGSTOP),
  // or a replacement server taking the dead rank (the view announces the rollback), which comes
  // well after the detection.
  Result result;
  std::optional<absl::Time> detected, continued;
  const bool server_restart = scenario.fault == Fault::kRestart && victim != "scheduler";
  if (scenario.fault != Fault::kStop && !server_restart) continued = t0;
  while (absl::Now() < t0 + kGiveUp &&
         !(detected && continued && absl::Now() > std::max(*detected, *continued) + kObserve)) {
    if (scenario.fault == Fault::kStop && !continued && absl::Now() >= t0 + kStopFor) {
      RETURN_IF_ERROR(cluster.child(victim)->Signal(SIGCONT));
      continued = absl::Now();
    }
    absl::StatusOr<Sample> polled = Poll(*client);
    if (!polled.ok() && scheduler_restart && !detected && !absl::IsAborted(polled.status())) {
      // Not back yet. A fresh channel: one whose attempts found no scheduler may keep failing fast
      // for a while after it is back.
      ASSIGN_OR_RETURN(client, SchedulerClient::Create(cluster.address(), absl::Seconds(2)));
      absl::SleepFor(kPoll);
      continue;
    }
    if (!polled.ok()) return polled.status();
    const Sample& s = samples.emplace_back(*polled);
    if (!continued && server_restart && s.restore_epoch > epoch0) continued = s.at;
    if (!detected && (scheduler_restart || s.membership_epoch > epoch0)) {
      detected = s.at;
      result.detect_s = absl::ToDoubleSeconds(s.at - t0);
    }
    absl::SleepFor(kPoll);
  }
  // (A scheduler that never came back left no sample after the injection.)
  const absl::Time observed_until = samples.back().at > t0 ? samples.back().at : absl::Now();

  const std::vector<StepEvent> events = StepEvents(cluster.log("server0"), scenario.mode == "sync");
  result.steps_per_s_before = Rate(events, t0 - kSteady, t0);
  result.steps_per_s_after = Rate(events, observed_until - absl::Seconds(1), observed_until);
  for (const StepEvent& e : events) {
    if (e.at >= t0 && e.weight < 0) ++result.skipped;
  }
  for (const StepEvent& e : events) {
    if (e.at >= t0 + kWindow && e.at <= observed_until &&
        Rate(events, e.at - kWindow, e.at) >= kFullSpeed * result.steps_per_s_before) {
      result.full_speed_s = absl::ToDoubleSeconds(e.at - t0);
      break;
    }
  }
  if (result.detect_s) {
    int redone = 0;
    for (int w = 0; w < kWorkers; ++w) {
      const std::string name = absl::StrCat("worker", w);
      if (name != victim || scenario.fault == Fault::kJoin) {
        redone = std::max(redone, RedoneSteps(cluster.log(name), epoch0, t0));
      }
    }
    result.redone = redone;
  }
  if (keep_trace) {
    std::ofstream trace(dir + "/trace.csv");
    trace << "seconds_since_injection,job_status_step,membership_epoch,live_workers,restore_epoch\n";
    for (const Sample& s : samples) {
      trace << absl::StrFormat("%.3f,%d,%d,%d,%d\n", absl::ToDoubleSeconds(s.at - t0), s.step, s.membership_epoch,
                               s.live_workers, s.restore_epoch);
    }
    std::ofstream steps(dir + "/steps.csv");
    steps << "seconds_since_injection,steps\n";
    for (const StepEvent& e : events) {
      steps << absl::StrFormat("%.4f,%d\n", absl::ToDoubleSeconds(e.at - t0), e.weight);
    }
  }
  return result;
}

// "1.23 [1.10-1.40]": median [min-max] over the runs that have the figure, "-" for none; notes
// the runs that do not have it.
template <typename T>
std::string Summary(const std::vector<std::optional<T>>& values, int decimals) {
  std::vector<double> v;
  for (const auto& x : values) {
    if (x) v.push_back(static_cast<double>(*x));
  }
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  const double median = v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  std::string out = absl::StrFormat("%.*f [%.*f-%.*f]", decimals, median, decimals, v.front(), decimals, v.back());
  if (v.size() < values.size()) {
    absl::StrAppend(&out, " (never in ", values.size() - v.size(), " of ", values.size(), " runs)");
  }
  return out;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "model name")) {
      return std::string(absl::StripAsciiWhitespace(line.substr(line.find(':') + 1)));
    }
  }
  return "unknown CPU";
}

std::string OwnDir() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : self.parent_path().string();
}

// `command`: the command line as given, for the report.
int Main(const std::string& command) {
  const std::string bin_dir = FLAGS_bin_dir.empty() ? OwnDir() : FLAGS_bin_dir;
  std::vector<const Scenario*> chosen;
  std::vector<std::string> known;
  for (const Scenario& s : AllScenarios()) known.push_back(s.name);
  for (absl::string_view name : absl::StrSplit(FLAGS_scenarios, ',', absl::SkipEmpty())) {
    auto it =
        std::find_if(AllScenarios().begin(), AllScenarios().end(), [&](const Scenario& s) { return s.name == name; });
    if (it == AllScenarios().end()) {
      std::fprintf(stderr, "--scenarios: unknown '%s'; expected a comma-separated list of %s\n",
                   std::string(name).c_str(), absl::StrJoin(known, ", ").c_str());
      return 2;
    }
    chosen.push_back(&*it);
  }
  std::error_code ec;
  std::string root = (std::filesystem::temp_directory_path(ec) / "churn_bench.XXXXXX").string();
  if (ec || mkdtemp(root.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }

  std::printf("## Recovery from failures\n\n");
  std::printf("- Machine: %u cores, %s\n", std::thread::hardware_concurrency(), CpuModel().c_str());
  std::printf("- Command: `%s`\n", command.c_str());
  std::printf(
      "- Cluster: 1 scheduler, %d servers, %d workers on 127.0.0.1; heartbeat 200 ms, dead after "
      "1000 ms; batch 32 per worker, 12000 training samples\n",
      kServers, kWorkers);
  std::printf(
      "- Median [min-max] of %d runs; times in seconds from the injection; a step is a global step "
      "(96 samples) in sync mode, one push (32 samples) in async mode\n",
      FLAGS_runs);
  std::printf(
      "- detect: until the scheduler's view shows a new membership epoch; for a scheduler restart "
      "(no membership change), until the restarted scheduler answers GetJobStatus. Steps redone: "
      "steps aborted and computed again, plus steps rolled back to a checkpoint. Killed and replaced: "
      "the new process (same binary, same flags) is started as soon as the old one is reaped\n\n");
  std::printf(
      "| scenario | detect (s) | back to full speed (s) | steps redone | repeats skipped | steps/s before "
      "| steps/s after |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  std::fflush(stdout);
  bool all_ok = true;
  for (const Scenario* scenario : chosen) {
    std::vector<std::optional<double>> detect, full_speed, before, after;
    std::vector<std::optional<int>> redone, skipped;
    for (int run = 0; run < FLAGS_runs; ++run) {
      const std::string dir = absl::StrCat(root, "/", scenario->name, "-", run);
      std::filesystem::create_directories(dir);
      absl::StatusOr<Result> r = RunOnce(*scenario, bin_dir, FLAGS_data_dir, dir, FLAGS_keep_logs);
      if (!r.ok()) {
        LOG(ERROR) << scenario->name << " run " << run << ": " << r.status();
        all_ok = false;
        continue;
      }
      detect.push_back(r->detect_s);
      full_speed.push_back(r->full_speed_s);
      redone.push_back(r->redone);
      skipped.push_back(r->skipped);
      before.push_back(r->steps_per_s_before);
      after.push_back(r->steps_per_s_after);
    }
    std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", scenario->title.c_str(), Summary(detect, 2).c_str(),
                Summary(full_speed, 2).c_str(), Summary(redone, 0).c_str(),
                scenario->mode == "sync" ? "-" : Summary(skipped, 0).c_str(), Summary(before, 0).c_str(),
                Summary(after, 0).c_str());
    std::fflush(stdout);
  }
  if (FLAGS_keep_logs || !all_ok) {
    std::printf("\nLogs%s: %s\n", FLAGS_keep_logs ? " and traces" : "", root.c_str());
  } else {
    std::filesystem::remove_all(root, ec);
  }
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  const std::string command = absl::StrJoin(argv, argv + argc, " ");
  pstrain::InitBinary("churn_bench [--runs=3] [--scenarios=kill,term,...] (see --scenarios for the list)", &argc,
                      &argv);
  return pstrain::bench::Main(command);
}
