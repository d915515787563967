#include "common/logging.h"

#include <unistd.h>
#include <atomic>

#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace switchyard {
namespace {

absl::Mutex log_mutex;
std::string& ProcessName() {
  static std::string* name = new std::string("switchyard");
  return *name;
}

char SeverityLetter(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kInfo:
      return 'I';
    case LogSeverity::kWarning:
      return 'W';
    case LogSeverity::kError:
      return 'E';
  }
  return '?';
}

}  // namespace

void SetLogProcessName(absl::string_view name) {
  absl::MutexLock lock(&log_mutex);
  ProcessName() = std::string(name);
}

namespace {
std::atomic<int> min_severity{0};
}  // namespace

void SetMinLogSeverity(LogSeverity minimum) { min_severity = static_cast<int>(minimum); }

LogMessage::~LogMessage() {
  if (static_cast<int>(severity_) < min_severity.load(std::memory_order_relaxed)) return;
  std::string time = absl::FormatTime("%m%d %H:%M:%E6S", absl::Now(), absl::UTCTimeZone());
  absl::MutexLock lock(&log_mutex);
  std::string line = std::string(1, SeverityLetter(severity_)) + time + " " + ProcessName() + "] " +
                     stream_.str() + "\n";
  // One write(2) per line keeps lines whole when several processes share a terminal.
  (void)!write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace switchyard
