#pragma once

// Names the calling thread ("sy-" and its role), as `top -H`, gdb and /proc show it.
// Every thread Switchyard starts is named, and docs/architecture.md lists each name
// (a test checks that the running processes have no other).

#include <pthread.h>

#include <string>

#include "absl/strings/string_view.h"

namespace switchyard {

inline void NameThisThread(absl::string_view name) {
  // The kernel keeps 15 characters.
  std::string truncated(name.substr(0, 15));
  pthread_setname_np(pthread_self(), truncated.c_str());
}

}  // namespace switchyard
