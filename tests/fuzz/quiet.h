#pragma once

// Fuzz inputs are mostly malformed: the logs they cause (protobuf's parse complaints,
// our warnings) would drown a finding and slow every run. Included by every target.

#include "common/logging.h"
#include "google/protobuf/stubs/logging.h"

namespace switchyard::fuzz {

inline void NoLog(google::protobuf::LogLevel, const char*, int, const std::string&) {}

inline const bool kQuiet = [] {
  google::protobuf::SetLogHandler(&NoLog);
  SetMinLogSeverity(LogSeverity::kError);
  return true;
}();

}  // namespace switchyard::fuzz
