#pragma once

// The `switchyard` subcommands. Each returns the process exit code; flags are
// parsed before they run.

namespace switchyard::cli {

int RunResourceManager();
int RunProxy();
int RunWorker();
int RunStatus();
int RunUp(const char* self_path);

}  // namespace switchyard::cli
