#include "common/metrics_endpoint.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/listen_error.h"

namespace pstrain {
namespace {

// Fields of /proc/self/stat after the command name (which may hold spaces): utime is field 14,
// stime 15, starttime 22, vsize 23, rss 24 (1-based over the whole line).
struct ProcStat {
  double cpu_seconds = 0;
  double start_seconds_after_boot = 0;
  double virtual_bytes = 0;
  double resident_bytes = 0;
};

bool ReadProcStat(ProcStat* out) {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::vector<std::string> f = absl::StrSplit(line.substr(close + 2), ' ');
  // f[0] is field 3 (state).
  if (f.size() < 22) return false;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  out->cpu_seconds = (std::stod(f[11]) + std::stod(f[12])) / ticks;
  out->start_seconds_after_boot = std::stod(f[19]) / ticks;
  out->virtual_bytes = std::stod(f[20]);
  out->resident_bytes = std::stod(f[21]) * page;
  return true;
}

double BootTime() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime") {
      in >> value;
      return value;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return 0;
}

int OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  int n = 0;
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n - 3;  // ".", ".." and the directory's own descriptor
}

}  // namespace

std::string MetricsAddress(const std::string& bind_host, const std::string& advertise_host, int port) {
  auto wildcard = [](const std::string& h) { return h.empty() || h == "0.0.0.0" || h == "::" || h == "[::]"; };
  const std::string& host = !wildcard(bind_host)        ? bind_host
                            : !wildcard(advertise_host) ? advertise_host
                                                        : std::string("127.0.0.1");
  return JoinHostPort(host, port);
}

HttpRoute MetricsRoute(const metrics::Registry* registry) {
  return HttpRoute{"/metrics", false, [registry](const HttpRequest&) {
                     HttpResponse r;
                     r.content_type = kPrometheusContentType;
                     r.body = registry->Render();
                     return r;
                   }};
}

absl::StatusOr<std::unique_ptr<HttpServer>> ServeMetrics(const metrics::Registry* registry, const std::string& host,
                                                         int port, std::vector<HttpRoute> more) {
  more.push_back(MetricsRoute(registry));
  more.push_back(HttpRoute{"/", false, [](const HttpRequest&) {
                             HttpResponse r;
                             r.body = "pstrain: Prometheus metrics at /metrics\n";
                             return r;
                           }});
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(host, port, std::move(more));
  if (absl::IsUnavailable(server.status())) return CannotListen("metrics", JoinHostPort(host, port), "metrics_port");
  return server;
}

void AddProcessMetrics(metrics::Registry* registry) {
  metrics::Counter* cpu =
      registry->AddCounter("process_cpu_seconds_total", "User and system CPU time the process spent").Get();
  metrics::Gauge* rss = registry->AddGauge("process_resident_memory_bytes", "Resident memory size").Get();
  metrics::Gauge* vsize = registry->AddGauge("process_virtual_memory_bytes", "Virtual memory size").Get();
  metrics::Gauge* fds = registry->AddGauge("process_open_fds", "Open file descriptors").Get();
  metrics::Gauge* start =
      registry->AddGauge("process_start_time_seconds", "When the process started, seconds since the Unix epoch").Get();
  const double boot = BootTime();
  registry->AddCollector([=] {
    ProcStat stat;
    if (!ReadProcStat(&stat)) return;
    cpu->RaiseTo(stat.cpu_seconds);
    rss->Set(stat.resident_bytes);
    vsize->Set(stat.virtual_bytes);
    fds->Set(OpenFds());
    start->Set(boot + stat.start_seconds_after_boot);
  });
}

}  // namespace pstrain
