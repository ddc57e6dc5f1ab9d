#include "launch/launcher.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "transport/job_credentials.h"
#include "common/status_macros.h"
#include "launch/child_process.h"
#include "launch/console.h"
#include "launch/free_port.h"
#include "launch/line_prefixer.h"
#include "launch/progress.h"

namespace pstrain {
namespace launch {
namespace {

constexpr absl::Duration kTick = absl::Milliseconds(100);  // Longest sleep between waitpid checks.
constexpr absl::string_view kSelf = "[launch] ";

// Blocks SIGINT, SIGTERM and SIGHUP for the process and reads them from a signalfd; restores the mask.
class SignalFd {
 public:
  SignalFd() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);  // The terminal went away.
    pthread_sigmask(SIG_BLOCK, &set, &old_mask_);
    fd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  }
  ~SignalFd() {
    if (fd_ >= 0) close(fd_);
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  int fd() const { return fd_; }
  // The next pending signal, or 0.
  int Take() {
    signalfd_siginfo info;
    if (fd_ < 0 || read(fd_, &info, sizeof(info)) != sizeof(info)) return 0;
    return static_cast<int>(info.ssi_signo);
  }

 private:
  sigset_t old_mask_;
  int fd_ = -1;
};

enum class Role { kScheduler, kServer, kWorker };

// One launch slot: its command line and the process now (or last) running it.
struct Child {
  Child(std::string name, Role role, ChildProcess::Options command, std::unique_ptr<ChildProcess> process)
      : name(name),
        role(role),
        command(std::move(command)),
        process(std::move(process)),
        out(absl::StrCat("[", name, "] ")),
        err(absl::StrCat("[", name, "] ")) {}
  std::string name;  // "scheduler", "server 0", "worker 1".
  Role role;
  ChildProcess::Options command;  // What a restart runs.
  std::unique_ptr<ChildProcess> process;
  LinePrefixer out, err;
  std::string last_err_line;  // The last whole line it wrote to stderr, prefixed; "" if none.
  bool ended = false;
  int restarts = 0;
};

// One run of RunLocalCluster: the children, the event loop and the stop logic. Single-threaded:
// everything happens in Step(), called in a loop from Run().
class Cluster {
 public:
  explicit Cluster(const LaunchOptions& options)
      : options_(options), console_(options.out_fd, options.err_fd, options.live_progress) {}

  absl::StatusOr<int> Run() {
    start_ = absl::Now();
    RETURN_IF_ERROR(CheckBinaries());
    RETURN_IF_ERROR(MakeTempDir());
    RETURN_IF_ERROR(SetUpSecurity());
    absl::Status started = Start();
    if (!started.ok()) BeginStop(1);
    while (!AllEnded()) Step();
    DrainAll();
    console_.ClearProgress();
    std::error_code ec;
    const bool have_summary = std::filesystem::exists(summary_path_, ec);
    if (started.ok() && exit_code_ == 0) {
      console_.Print(Stream::kStdout, FormatFinalResult(last_status_, absl::ToDoubleSeconds(absl::Now() - start_),
                                                        have_summary ? summary_path_ : ""));
    } else if (have_summary) {
      // A failed job's summary says how far it got.
      console_.Print(Stream::kStderr, absl::StrCat(kSelf, "summary ", summary_path_));
    }
    RemoveTempDir();
    if (!started.ok()) return started;
    return exit_code_;
  }

 private:
  std::string Binary(absl::string_view name) const {
    return (std::filesystem::path(options_.bin_dir) / std::string(name)).string();
  }

  absl::Status CheckBinaries() const {
    for (const char* name : {"pstrain-scheduler", "pstrain-server", "pstrain-worker"}) {
      if (!options_.worker_cmd.empty() && absl::string_view(name) == "pstrain-worker") continue;
      if (access(Binary(name).c_str(), X_OK) != 0) {
        return absl::NotFoundError(absl::StrCat("no executable ", name, " in '", options_.bin_dir, "' (",
                                                strerror(errno), "); set --bin_dir"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status MakeTempDir() {
    std::error_code ec;
    std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
    if (ec) tmp = "/tmp";
    std::string pattern = (tmp / "pstrain-launch-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("mkdtemp('", pattern, "'): ", strerror(errno)));
    }
    temp_dir_ = pattern;
    summary_path_ = options_.summary_json.empty() ? temp_dir_ + "/summary.json" : options_.summary_json;
    return absl::OkStatus();
  }

  // The job's transport security: per-role credentials from options_.tls_dir, or throwaway ones
  // made in the temp folder (see LaunchOptions::security); or plaintext with --insecure.
  absl::Status SetUpSecurity() {
    const TransportSecurityOptions& given = options_.security;
    if (!given.cert_file.empty() || !given.key_file.empty() || !given.ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_cert/--tls_key/--tls_ca would give every role the same certificate, and each role needs its own "
          "(a worker's cannot register a server): give --tls_dir=DIR, a folder of the job's per-role credentials (ca.pem, "
          "token, scheduler.pem, scheduler-key.pem, server.pem, server-key.pem, worker.pem, worker-key.pem, "
          "operator.pem, operator-key.pem, as deploy/k8s/tools/make-tls-secret.sh --dir writes), or nothing for "
          "throwaway ones");
    }
    if (given.insecure) {
      if (!options_.tls_dir.empty()) {
        return absl::InvalidArgumentError("--insecure and --tls_dir contradict each other: give one");
      }
      ASSIGN_OR_RETURN(security_, TransportSecurity::Create(given));
      for (CertRole role : kCertRoles) role_security_[role] = given;
      return absl::OkStatus();
    }
    JobCredentials credentials{options_.tls_dir, given.server_name};
    if (credentials.dir.empty()) {
      credentials.dir = temp_dir_ + "/tls";
      std::error_code ec;
      std::filesystem::create_directory(credentials.dir, ec);
      if (ec) return absl::InternalError(absl::StrCat("creating '", credentials.dir, "': ", ec.message()));
      std::filesystem::permissions(credentials.dir, std::filesystem::perms::owner_all, ec);
      JobCredentialOptions made_options;
      made_options.server_name = given.server_name;
      made_options.job = std::filesystem::path(temp_dir_).filename().string();
      ASSIGN_OR_RETURN(credentials, MakeJobCredentials(credentials.dir, made_options));
    }
    // Each role's files checked now (present, belonging together, for that role), so that a bad
    // --tls_dir fails here rather than in a child.
    for (CertRole role : kCertRoles) {
      if (role == CertRole::kServing) continue;  // the launcher starts no pstrain-serve
      TransportSecurityOptions options = credentials.For(role);
      options.reload_interval = given.reload_interval;
      options.role = role;
      absl::StatusOr<std::shared_ptr<const TransportSecurity>> checked = TransportSecurity::Create(options);
      if (!checked.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--tls_dir=", credentials.dir, ": the ", CertRoleName(role),
                                                       "'s credentials: ", checked.status().message()));
      }
      if (role == CertRole::kOperator) security_ = *checked;  // The launcher polls the job as its operator.
      role_security_[role] = std::move(options);
    }
    return absl::OkStatus();
  }

  // The flags that give a child of `role` its credentials.
  std::vector<std::string> SecurityFlags(CertRole role) const {
    return TransportSecurityFlags(role_security_.at(role));
  }

  // Keeps the default summary (and so its folder); removes everything else the run left there.
  void RemoveTempDir() {
    if (temp_dir_.empty()) return;
    std::error_code ec;
    const bool keep_summary = options_.summary_json.empty() && std::filesystem::exists(summary_path_, ec);
    for (const auto& entry : std::filesystem::directory_iterator(temp_dir_, ec)) {
      if (keep_summary && entry.path() == summary_path_) continue;
      std::filesystem::remove_all(entry.path(), ec);
    }
    if (!keep_summary) std::filesystem::remove(temp_dir_, ec);
  }

  absl::Status Spawn(std::string name, Role role, std::vector<std::string> argv,
                     std::vector<std::pair<std::string, std::string>> env = {}) {
    ChildProcess::Options command{std::move(argv), std::move(env)};
    VLOG(1) << "starting " << name << ": " << absl::StrJoin(command.argv, " ");
    ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> process, ChildProcess::Spawn(command));
    children_.push_back(std::make_unique<Child>(std::move(name), role, std::move(command), std::move(process)));
    return absl::OkStatus();
  }

  // Starts an ended child's command line again in its slot.
  absl::Status Restart(Child& child) {
    FlushPartialLines(child);  // The old process's last words keep their own line.
    VLOG(1) << "restarting " << child.name << ": " << absl::StrJoin(child.command.argv, " ");
    ASSIGN_OR_RETURN(child.process, ChildProcess::Spawn(child.command));
    child.ended = false;
    return absl::OkStatus();
  }

  // Picks the dashboard's and every role's metrics port (see LaunchOptions::metrics).
  absl::Status PickObservabilityPorts() {
    std::set<int> taken;
    auto pick = [&](int* port) -> absl::Status {
      ASSIGN_OR_RETURN(*port, PickFreePort(options_.host, taken));
      taken.insert(*port);
      return absl::OkStatus();
    };
    if (options_.http_port > 0) {
      http_port_ = options_.http_port;
      taken.insert(http_port_);
    } else if (options_.http_port < 0) {
      RETURN_IF_ERROR(pick(&http_port_));
    }
    if (!options_.metrics) return absl::OkStatus();
    RETURN_IF_ERROR(pick(&scheduler_metrics_port_));
    server_metrics_ports_.resize(options_.num_servers);
    for (int& port : server_metrics_ports_) RETURN_IF_ERROR(pick(&port));
    worker_metrics_ports_.resize(options_.num_workers);
    for (int& port : worker_metrics_ports_) RETURN_IF_ERROR(pick(&port));
    return absl::OkStatus();
  }

  // --metrics_port and --metrics_host for a role with metrics port `port` (none when 0).
  std::vector<std::string> MetricsFlags(int port) const {
    if (port == 0) return {};
    return {absl::StrCat("--metrics_port=", port), absl::StrCat("--metrics_host=", options_.host)};
  }

  void PrintObservabilityUrls() {
    auto url = [&](int port, absl::string_view path) {
      return absl::StrCat("http://", options_.host, ":", port, path);
    };
    if (http_port_ > 0) console_.Print(Stream::kStdout, absl::StrCat(kSelf, "dashboard ", url(http_port_, "/")));
    if (!options_.metrics) return;
    console_.Print(Stream::kStdout,
                   absl::StrCat(kSelf, "metrics scheduler ", url(scheduler_metrics_port_, "/metrics")));
    for (size_t i = 0; i < server_metrics_ports_.size(); ++i) {
      console_.Print(Stream::kStdout,
                     absl::StrCat(kSelf, "metrics server ", i, " ", url(server_metrics_ports_[i], "/metrics")));
    }
    for (size_t i = 0; i < worker_metrics_ports_.size(); ++i) {
      console_.Print(Stream::kStdout,
                     absl::StrCat(kSelf, "metrics worker ", i, " ", url(worker_metrics_ports_[i], "/metrics")));
    }
  }

  absl::Status Start() {
    RETURN_IF_ERROR(PickObservabilityPorts());
    const std::string port_file = temp_dir_ + "/scheduler.port";
    std::vector<std::string> argv = {Binary("pstrain-scheduler"),
                                     absl::StrCat("--host=", options_.host),
                                     "--port=0",
                                     absl::StrCat("--port_file=", port_file),
                                     absl::StrCat("--summary_json=", summary_path_),
                                     absl::StrCat("--heartbeat_ms=", options_.heartbeat_ms),
                                     absl::StrCat("--dead_after_ms=", options_.dead_after_ms)};
    if (options_.hold_up_after_ms > 0) argv.push_back(absl::StrCat("--hold_up_after_ms=", options_.hold_up_after_ms));
    std::string state_dir = options_.state_dir;
    if (state_dir.empty() && options_.max_restarts > 0) state_dir = temp_dir_ + "/scheduler-state";
    if (!state_dir.empty()) argv.push_back(absl::StrCat("--state_dir=", state_dir));
    for (std::string& flag : MetricsFlags(scheduler_metrics_port_)) argv.push_back(std::move(flag));
    if (http_port_ > 0) argv.push_back(absl::StrCat("--http_port=", http_port_));
    if (http_port_ > 0 && options_.dashboard_linger > absl::ZeroDuration()) {
      argv.push_back(absl::StrCat("--linger_ms=", absl::ToInt64Milliseconds(options_.dashboard_linger)));
    }
    for (std::string& flag : SecurityFlags(CertRole::kScheduler)) argv.push_back(std::move(flag));
    argv.insert(argv.end(), options_.job_flags.begin(), options_.job_flags.end());
    RETURN_IF_ERROR(Spawn("scheduler", Role::kScheduler, std::move(argv)));

    // Until the port file appears the scheduler's own output and exit are handled as usual.
    const absl::Time deadline = absl::Now() + options_.port_timeout;
    int port = 0;
    while (!stopping_ && !(port = ReadPort(port_file))) {
      if (children_.front()->ended) {  // Exited 0 (a failure would have set stopping_).
        return absl::FailedPreconditionError(
            absl::StrCat("the scheduler exited without writing its port to ", port_file));
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("the scheduler wrote no port to ", port_file, " within ",
                                                        absl::FormatDuration(options_.port_timeout)));
      }
      Step();
    }
    if (stopping_) return absl::OkStatus();
    scheduler_address_ = absl::StrCat(options_.host, ":", port);
    // A restarted scheduler must come back where the others look for it.
    for (std::string& arg : children_.front()->command.argv) {
      if (arg == "--port=0") arg = absl::StrCat("--port=", port);
    }
    console_.Print(Stream::kStdout,
                   absl::StrCat(kSelf, "scheduler listening on ", scheduler_address_, "; starting ",
                                options_.num_servers, " servers and ", options_.num_workers, " workers"));
    PrintObservabilityUrls();
    status_source_ = options_.status_source
                         ? options_.status_source(scheduler_address_)
                         : NewSchedulerStatusSource(scheduler_address_, options_.status_deadline, security_);
    const std::string scheduler_flag = absl::StrCat("--scheduler=", scheduler_address_);
    for (int i = 0; i < options_.num_servers; ++i) {
      std::vector<std::string> args = {Binary("pstrain-server"), scheduler_flag, absl::StrCat("--host=", options_.host),
                                       "--port=0"};
      if (options_.unix_sockets) args.push_back(absl::StrCat("--unix_socket_dir=", temp_dir_));
      if (options_.metrics) {
        for (std::string& flag : MetricsFlags(server_metrics_ports_[i])) args.push_back(std::move(flag));
      }
      for (std::string& flag : SecurityFlags(CertRole::kServer)) args.push_back(std::move(flag));
      RETURN_IF_ERROR(Spawn(absl::StrCat("server ", i), Role::kServer, std::move(args)));
    }
    const std::vector<std::string> devices = absl::StrSplit(options_.device, ',');
    for (int i = 0; i < options_.num_workers; ++i) {
      const std::string& device = devices[i % devices.size()];
      if (!options_.worker_cmd.empty()) {
        RETURN_IF_ERROR(Spawn(absl::StrCat("worker ", i), Role::kWorker,
                              {"/bin/sh", "-c", absl::StrCat("exec ", options_.worker_cmd)}, WorkerCmdEnv(i, device)));
        continue;
      }
      std::vector<std::string> args = {Binary("pstrain-worker"), scheduler_flag, absl::StrCat("--device=", device)};
      if (options_.tf32) args.push_back("--tf32");
      if (options_.metrics) {
        for (std::string& flag : MetricsFlags(worker_metrics_ports_[i])) args.push_back(std::move(flag));
      }
      for (std::string& flag : SecurityFlags(CertRole::kWorker)) args.push_back(std::move(flag));
      RETURN_IF_ERROR(Spawn(absl::StrCat("worker ", i), Role::kWorker, std::move(args)));
    }
    return absl::OkStatus();
  }

  // The environment of worker slot `index` running the worker_cmd (see LaunchOptions).
  std::vector<std::pair<std::string, std::string>> WorkerCmdEnv(int index, const std::string& device) const {
    std::vector<std::pair<std::string, std::string>> env = {{"PSTRAIN_SCHEDULER", scheduler_address_},
                                                            {"PSTRAIN_WORKER_INDEX", absl::StrCat(index)},
                                                            {"PSTRAIN_DEVICE", device}};
    if (options_.metrics) {
      env.emplace_back("PSTRAIN_METRICS_PORT", absl::StrCat(worker_metrics_ports_[index]));
      env.emplace_back("PSTRAIN_METRICS_HOST", options_.host);
    }
    for (auto& variable : TransportSecurityEnvironment(role_security_.at(CertRole::kWorker))) {
      env.push_back(std::move(variable));
    }
    std::error_code ec;
    const std::filesystem::path python = std::filesystem::path(options_.bin_dir) / ".." / "python";
    if (std::filesystem::is_directory(python, ec)) {
      std::filesystem::path absolute = std::filesystem::canonical(python, ec);
      if (ec) absolute = std::filesystem::absolute(python, ec).lexically_normal();
      env.emplace_back("PYTHONPATH", options_.pythonpath.empty()
                                         ? absolute.string()
                                         : absl::StrCat(absolute.string(), ":", options_.pythonpath));
    }
    return env;
  }

  // The port in `path`, or 0 while the file is missing or incomplete.
  static int ReadPort(const std::string& path) {
    std::ifstream in(path);
    if (!in) return 0;
    std::stringstream text;
    text << in.rdbuf();
    int port = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text.str()), &port) || port <= 0 || port > 65535) return 0;
    return port;
  }

  bool AllEnded() const {
    for (const auto& child : children_) {
      if (!child->ended) return false;
    }
    return true;
  }

  // One round of the event loop: waits up to kTick for output or a signal, then handles
  // signals, output, ended children, progress and stop deadlines.
  void Step() {
    std::vector<pollfd> fds;
    fds.push_back({signals_.fd(), POLLIN, 0});
    for (const auto& child : children_) {
      for (Stream s : {Stream::kStdout, Stream::kStderr}) {
        if (child->process->fd(s) >= 0) fds.push_back({child->process->fd(s), POLLIN, 0});
      }
    }
    poll(fds.data(), fds.size(), static_cast<int>(absl::ToInt64Milliseconds(kTick)));

    while (int signal = signals_.Take()) OnSignal(signal);
    for (const auto& child : children_) Drain(*child);
    std::vector<std::pair<Child*, ExitStatus>> exits;
    for (const auto& child : children_) {
      if (child->ended) continue;
      std::optional<ExitStatus> exit = child->process->Poll();
      if (!exit.has_value()) continue;
      child->ended = true;
      Drain(*child);
      exits.emplace_back(child.get(), *exit);
    }
    // The job's state now decides what a death means (see OnExit).
    PollStatus(/*force=*/!exits.empty());
    for (auto& [child, exit] : exits) OnExit(*child, exit);
    CheckDeadlines();
  }

  void OnSignal(int signal) {
    if (signal_ != 0) {
      console_.Print(Stream::kStderr,
                     absl::StrCat(kSelf, "second SIG", sigabbrev_np(signal), ": killing every child now"));
      KillAll(SIGKILL);
      return;
    }
    signal_ = signal;
    console_.Print(Stream::kStderr, absl::StrCat(kSelf, "got SIG", sigabbrev_np(signal), ": stopping the cluster"));
    BeginStop(128 + signal);
  }

  void OnExit(Child& child, const ExitStatus& exit) {
    VLOG(1) << child.name << " " << exit.ToString();
    if (stopping_) return;  // Expected: we asked it to stop.
    // Once the scheduler ended, or said the job finished or failed, there is nothing to rejoin
    // and every failure counts.
    // A scheduler that exits with a status has decided the job's outcome itself (it exits 1 when the
    // job failed); only one killed by a signal (a crash, kill -9) is restarted to go on.
    const bool job_over = (child.role != Role::kScheduler && children_.front()->ended) ||
                          (child.role == Role::kScheduler && !exit.signaled) || last_status_.state() == FINISHED ||
                          last_status_.state() == FAILED;
    if (!exit.ok() && !job_over && child.restarts < options_.max_restarts) {
      ++child.restarts;
      console_.Print(Stream::kStderr, absl::StrCat(kSelf, child.name, " died (", exit.ToString(), "); restarting (",
                                                   child.restarts, " of ", options_.max_restarts, ")"));
      absl::Status restarted = Restart(child);
      if (!restarted.ok()) {
        console_.Print(Stream::kStderr,
                       absl::StrCat(kSelf, "could not restart ", child.name, ": ", restarted.message()));
        BeginStop(1);
      }
      return;
    }
    if (!exit.ok() && !job_over && child.role == Role::kWorker) {
      // The scheduler sees it go and fails the job if too few workers are left.
      console_.Print(Stream::kStderr,
                     absl::StrCat(kSelf, child.name, " ", exit.ToString(), "; the job continues without it"));
      if (NoWorkerLeftBeforeStart()) {
        // Nobody can ever join, so the scheduler would only wait out its barrier deadline.
        console_.Print(Stream::kStderr, absl::StrCat(kSelf, "job failed: every worker exited before the job started",
                                                     child.last_err_line.empty() ? "" : "; the last one said: ",
                                                     child.last_err_line, FixFor(child.last_err_line)));
        BeginStop(1);
      }
      return;
    }
    if (!exit.ok()) {
      console_.Print(Stream::kStderr, absl::StrCat(kSelf, child.name, " ", exit.ToString()));
      BeginStop(1);
      return;
    }
    if (&child == children_.front().get() && !AllEnded()) {
      // The scheduler is done; the others should follow within a heartbeat or two.
      finish_deadline_ = absl::Now() + options_.finish_timeout;
    }
  }

  // What to do about a worker's last words, for the failures a newcomer meets first ("" if none
  // is known).
  static std::string FixFor(absl::string_view line) {
    if (absl::StrContains(line, "No module named 'pstrain'")) {
      return " (the pstrain package is not built: `make build` builds it into build/python, which the launcher "
             "puts on PYTHONPATH; or install it, see python/README.md)";
    }
    if (absl::StrContains(line, "No module named 'torch'") || absl::StrContains(line, "No module named 'numpy'")) {
      return " (Debian's python3-torch and python3-numpy are missing: scripts/install-deps.sh all installs them)";
    }
    return "";
  }

  // True when every worker slot has ended for good while the scheduler still waits for its roles.
  bool NoWorkerLeftBeforeStart() const {
    if (last_status_.state() != WAITING_FOR_ROLES) return false;
    for (const auto& child : children_) {
      if (child->role == Role::kWorker && !child->ended) return false;
    }
    return true;
  }

  void CheckDeadlines() {
    const absl::Time now = absl::Now();
    if (stopping_ && !killed_ && now > kill_deadline_) {
      console_.Print(Stream::kStderr,
                     absl::StrCat(kSelf, "children still running ", absl::FormatDuration(options_.stop_grace),
                                  " after SIGTERM: sending SIGKILL"));
      KillAll(SIGKILL);
    }
    if (!stopping_ && finish_deadline_.has_value() && now > *finish_deadline_) {
      for (const auto& child : children_) {
        if (child->ended) continue;
        console_.Print(Stream::kStderr,
                       absl::StrCat(kSelf, child->name, " still running ",
                                    absl::FormatDuration(options_.finish_timeout), " after the scheduler finished"));
      }
      BeginStop(1);
    }
  }

  // Stops every running child (SIGTERM now, SIGKILL at kill_deadline_). The first cause wins
  // the exit code.
  void BeginStop(int exit_code) {
    if (stopping_) return;
    stopping_ = true;
    exit_code_ = exit_code;
    kill_deadline_ = absl::Now() + options_.stop_grace;
    KillAll(SIGTERM);
  }

  void KillAll(int signal) {
    if (signal == SIGKILL) killed_ = true;
    for (const auto& child : children_) {
      if (!child->ended) (void)child->process->Signal(signal);
    }
  }

  void Drain(Child& child) {
    for (Stream s : {Stream::kStdout, Stream::kStderr}) {
      std::string bytes;
      absl::StatusOr<bool> open = child.process->Read(s, &bytes);
      LinePrefixer& prefixer = s == Stream::kStdout ? child.out : child.err;
      for (const std::string& line : prefixer.Add(bytes)) Print(child, s, line);
      if (!open.ok()) VLOG(1) << open.status();
      if (!open.ok() || !*open) {
        if (std::optional<std::string> last = prefixer.Flush()) Print(child, s, *last);
      }
    }
  }

  // After every child ended: what is left in the pipes, and partial last lines. A grandchild
  // holding a pipe open is not waited for.
  void DrainAll() {
    for (const auto& child : children_) FlushPartialLines(*child);
  }

  // Drains `child` and prints partial last lines even if its pipes are still open.
  void FlushPartialLines(Child& child) {
    Drain(child);
    for (Stream s : {Stream::kStdout, Stream::kStderr}) {
      LinePrefixer& prefixer = s == Stream::kStdout ? child.out : child.err;
      if (std::optional<std::string> last = prefixer.Flush()) Print(child, s, *last);
    }
  }

  // Prints one prefixed line of `child`'s output, remembering its last stderr line.
  void Print(Child& child, Stream s, const std::string& line) {
    if (s == Stream::kStderr) child.last_err_line = line;
    console_.Print(s, line);
  }

  // Asks the scheduler for progress every status_interval (or now, with `force`) while it runs.
  void PollStatus(bool force) {
    if (status_source_ == nullptr || children_.front()->ended) return;
    const absl::Time now = absl::Now();
    if (!force && now < next_status_) return;
    next_status_ = now + options_.status_interval;
    absl::StatusOr<JobStatus> status = status_source_->Get();
    if (!status.ok()) {
      VLOG(2) << status.status();
      return;
    }
    last_status_ = *std::move(status);
    const int epochs = last_status_.epochs();
    for (; epochs_printed_ < last_status_.epochs_done_size(); ++epochs_printed_) {
      console_.Print(Stream::kStdout, FormatEpochLine(last_status_.epochs_done(epochs_printed_), epochs));
    }
    if (last_status_.state() == FAILED && !failure_printed_) {
      failure_printed_ = true;
      console_.Print(Stream::kStderr, absl::StrCat(kSelf, "job failed: ", last_status_.failure()));
    }
    const bool over = last_status_.state() == FINISHED || last_status_.state() == FAILED;
    if (over && !linger_printed_ && http_port_ > 0 && options_.dashboard_linger > absl::ZeroDuration()) {
      linger_printed_ = true;
      console_.Print(Stream::kStdout,
                     absl::StrCat(kSelf, "the dashboard stays up ", absl::FormatDuration(options_.dashboard_linger),
                                  " at http://", options_.host, ":", http_port_, "/ (Ctrl-C ends it)"));
    }
    if (stopping_) return;
    const std::string line = FormatProgressLine(last_status_, options_.num_servers, options_.num_workers);
    if (console_.live_progress()) {
      console_.SetProgress(line);
    } else if (now >= next_progress_line_) {
      next_progress_line_ = now + options_.progress_interval;
      console_.Print(Stream::kStdout, line);
    }
  }

  const LaunchOptions& options_;
  Console console_;
  SignalFd signals_;
  absl::Time start_;
  std::string temp_dir_;
  std::string summary_path_;
  std::string scheduler_address_;
  // Observability ports (0: none), picked in Start.
  int http_port_ = 0;
  bool linger_printed_ = false;
  int scheduler_metrics_port_ = 0;
  std::vector<int> server_metrics_ports_;
  std::vector<int> worker_metrics_ports_;
  // Each role's credentials (all the same with --insecure); the launcher's own is the operator's.
  std::map<CertRole, TransportSecurityOptions> role_security_;
  std::shared_ptr<const TransportSecurity> security_;
  std::unique_ptr<JobStatusSource> status_source_;
  // children_[0] is the scheduler, then servers, then workers.
  std::vector<std::unique_ptr<Child>> children_;

  bool stopping_ = false;
  bool killed_ = false;
  int exit_code_ = 0;
  int signal_ = 0;
  absl::Time kill_deadline_;
  std::optional<absl::Time> finish_deadline_;

  JobStatus last_status_;
  int epochs_printed_ = 0;
  bool failure_printed_ = false;
  absl::Time next_status_ = absl::InfinitePast();
  absl::Time next_progress_line_ = absl::InfinitePast();
};

}  // namespace

absl::StatusOr<int> RunLocalCluster(const LaunchOptions& options) {
  Cluster cluster(options);
  return cluster.Run();
}

}  // namespace launch
}  // namespace pstrain
