#pragma once

// The `switchyard` subcommands. Each returns the process exit code; flags are
// parsed before they run.

#include <string>
#include <vector>

namespace switchyard::cli {

int RunResourceManager();
int RunProxy();
int RunWorker();
int RunStatus();
int RunUp(const char* self_path);
// `switchyard cache ls | stats | prune`: `args` are the words after `cache`.
int RunCache(const std::vector<std::string>& args);
bool IsCommand(const std::string& command);
// `switchyard <command> --help`: prints the command's flags; false for an unknown command.
bool PrintCommandHelp(const std::string& command);

}  // namespace switchyard::cli
