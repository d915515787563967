#pragma once

// A Prometheus `/metrics` endpoint over HTTP, for the long-running processes, and any
// other read-only pages they serve beside it (the RM's dashboard). The caller renders
// the text exposition; `MetricsText` helps write it.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace switchyard {

// `name="value"`, the value escaped as the text format wants (it may come from outside).
std::string MetricLabel(const std::string& name, const std::string& value);

class MetricsText {
 public:
  // One sample, with HELP/TYPE lines the first time `name` appears.
  MetricsText& Add(const std::string& name, const std::string& type, const std::string& help,
                   double value, const std::string& labels = "");
  std::string str() const { return text_; }

 private:
  std::string text_;
  std::string last_name_;
};

// One more page: GET `path` answers `render()` as `content_type`.
struct HttpPage {
  std::string path;
  std::string content_type;
  std::function<std::string()> render;
};

// Where this process writes the port it serves metrics on, once bound ("": nowhere):
// how `switchyard up` learns the ports its children chose. Set once, by main, before
// any server starts.
void SetMetricsPortFile(std::string path);

class MetricsServer {
 public:
  // Serves GET /metrics, and `pages`, on host:port (0 picks a free port). UNAVAILABLE if
  // the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port,
                                                              std::function<std::string()> render,
                                                              std::vector<HttpPage> pages = {});
  // Like `Start`, but null when `port` is negative (metrics off); logs the address, and
  // writes the port to the file SetMetricsPortFile named, if any.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> StartIfEnabled(
      const std::string& host, int port, std::function<std::string()> render,
      std::vector<HttpPage> pages = {});
  virtual ~MetricsServer() = default;
  virtual int port() const = 0;
};

}  // namespace switchyard
