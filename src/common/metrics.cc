#include "common/metrics.h"
#include "common/thread_name.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/files.h"
#include "common/logging.h"
#include "common/machine_memory.h"
#include "httplib.h"

namespace switchyard {

std::string MetricLabel(const std::string& name, const std::string& value) {
  std::string escaped;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      escaped += '\\';
      escaped += c;
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped += c;
    }
  }
  return absl::StrCat(name, "=\"", escaped, "\"");
}

MetricsText& MetricsText::Add(const std::string& name, const std::string& type,
                              const std::string& help, double value, const std::string& labels) {
  if (name != last_name_) {
    absl::StrAppend(&text_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
    last_name_ = name;
  }
  absl::StrAppend(&text_, name, labels.empty() ? "" : absl::StrCat("{", labels, "}"), " ",
                  absl::StrFormat("%.17g", value), "\n");
  return *this;
}

namespace {

class HttpMetricsServer final : public MetricsServer {
 public:
  HttpMetricsServer(std::function<std::string()> render, std::vector<HttpPage> pages) {
    server_.Get("/metrics", [render = std::move(render)](const httplib::Request&,
                                                         httplib::Response& response) {
      // Every process says what it holds, under the name Prometheus' own
      // process collectors use.
      std::string text = render();
      text += MetricsText()
                  .Add("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                       static_cast<double>(ResidentBytes()))
                  .str();
      response.set_content(text, "text/plain; version=0.0.4");
    });
    for (HttpPage& page : pages) {
      const std::string path = page.path;  // before `page` moves into the handler
      server_.Get(path,
                  [page = std::move(page)](const httplib::Request&, httplib::Response& response) {
                    response.set_content(page.render(), page.content_type);
                    // Read-only pages of this process only: no other site may script them.
                    response.set_header("X-Content-Type-Options", "nosniff");
                    response.set_header("Content-Security-Policy",
                                        "default-src 'self'; script-src 'self' 'unsafe-inline'; "
                                        "style-src 'unsafe-inline'; frame-ancestors 'none'");
                  });
    }
  }
  ~HttpMetricsServer() override {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  absl::Status Listen(const std::string& host, int port) {
    port_ =
        port == 0 ? server_.bind_to_any_port(host) : (server_.bind_to_port(host, port) ? port : -1);
    if (port_ <= 0) {
      return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", host, ":", port));
    }
    thread_ = std::thread([this] {
      NameThisThread("sy-metrics");
      server_.listen_after_bind();
    });
    return absl::OkStatus();
  }

  int port() const override { return port_; }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = -1;
};

std::string& PortFile() {
  static auto* path = new std::string();
  return *path;
}

}  // namespace

void SetMetricsPortFile(std::string path) { PortFile() = std::move(path); }

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& host, int port, std::function<std::string()> render,
    std::vector<HttpPage> pages) {
  auto server = std::make_unique<HttpMetricsServer>(std::move(render), std::move(pages));
  absl::Status status = server->Listen(host, port);
  if (!status.ok()) return status;
  return server;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::StartIfEnabled(
    const std::string& host, int port, std::function<std::string()> render,
    std::vector<HttpPage> pages) {
  if (port < 0) return std::unique_ptr<MetricsServer>();
  auto server = Start(host, port, std::move(render), std::move(pages));
  if (server.ok()) {
    SY_LOG(Info) << "metrics on http://" << host << ":" << (*server)->port() << "/metrics";
    if (!PortFile().empty()) {
      // Whole or not at all: `up` may read it while it is written.
      absl::Status written = WriteFileAtomically(PortFile(), absl::StrCat((*server)->port(), "\n"));
      if (!written.ok()) SY_LOG(Warning) << "metrics port file: " << written.message();
    }
  }
  return server;
}

}  // namespace switchyard
