#pragma once

// The real CPU plugin that the unit tests load (set by CMake from the venv).

#include <cstdlib>
#include <string>

namespace switchyard::pjrt {

inline std::string TestPluginPath() {
  const char* path = std::getenv("SWITCHYARD_TEST_PLUGIN");
  return path == nullptr ? "" : path;
}

}  // namespace switchyard::pjrt
