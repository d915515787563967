#pragma once

// One line per lifecycle event, to stderr:
//   I1129 19:22:40.123456 rm] worker 127.0.0.1:29005 joined slice 0 host 0
// `SetLogProcessName` is called once by each main; logging is thread-safe.

#include <sstream>
#include <string>

#include "absl/strings/string_view.h"

namespace switchyard {

enum class LogSeverity { kInfo, kWarning, kError };

void SetLogProcessName(absl::string_view name);
// Messages below `minimum` are dropped (fuzzers keep only errors).
void SetMinLogSeverity(LogSeverity minimum);

// Accumulates one message and writes it, whole, when destroyed.
class LogMessage {
 public:
  explicit LogMessage(LogSeverity severity) : severity_(severity) {}
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;

  template <typename T>
  LogMessage& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

}  // namespace switchyard

#define SY_LOG(severity) ::switchyard::LogMessage(::switchyard::LogSeverity::k##severity)
