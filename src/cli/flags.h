#pragma once

// Flags shared by several subcommands (names follow Pathways on Cloud).

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(int, server_port);
ABSL_DECLARE_FLAG(std::string, listen_host);
ABSL_DECLARE_FLAG(std::string, resource_manager_address);
ABSL_DECLARE_FLAG(std::string, pjrt_plugin);
ABSL_DECLARE_FLAG(std::string, python);
ABSL_DECLARE_FLAG(int, metrics_port);
