#include "worker/worker_python.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

extern char** environ;

namespace switchyard::worker {
namespace {

// Finds the modules without importing them (jax's import takes seconds).
constexpr char kProbeScript[] =
    "import importlib.util as u\n"
    "print(' '.join('1' if u.find_spec(m) else '0' for m in "
    "('jaxlib', 'jax', 'cloudpickle', 'switchyard')))\n";

constexpr absl::Duration kProbeTimeout = absl::Seconds(20);

// `python3` on PATH, resolved, or empty.
std::string OnPath(const char* name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string Missing(const PythonModules& modules) {
  std::vector<std::string> missing;
  if (!modules.jax) missing.push_back("jax");
  if (!modules.cloudpickle) missing.push_back("cloudpickle");
  if (!modules.switchyard) missing.push_back("switchyard");
  return absl::StrJoin(missing, ", ");
}

}  // namespace

std::vector<PythonCandidate> WorkerPythonCandidates(const std::string& flag, const std::string& env,
                                                    const std::string& binary_dir,
                                                    const std::string& build_python) {
  if (!flag.empty()) return {{flag, "--python"}};
  std::vector<PythonCandidate> all = {
      {env, "$SWITCHYARD_WORKER_PYTHON"},
      {binary_dir.empty() ? "" : absl::StrCat(binary_dir, "/python3"), "next to the binary"},
      {build_python, "the venv this binary was built with"},
      {OnPath("python3"), "python3 on PATH"},
  };
  std::vector<PythonCandidate> candidates;
  std::set<std::string> seen;
  for (PythonCandidate& candidate : all) {
    if (candidate.path.empty() || !seen.insert(candidate.path).second) continue;
    candidates.push_back(std::move(candidate));
  }
  return candidates;
}

WorkerPython ChooseWorkerPython(const std::vector<PythonCandidate>& candidates,
                                const PythonProbe& probe) {
  constexpr char kHowToTurnOn[] =
      "start the worker with --python=<a Python with jaxlib, jax, cloudpickle and "
      "switchyard> (or set $SWITCHYARD_WORKER_PYTHON)";
  WorkerPython chosen;
  if (candidates.size() == 1 && candidates[0].path == kNoPython) {
    chosen.colocated_off = "this worker was started with --python=none";
    chosen.summary =
        "--python=none: jaxlib's kernels (jnp.linalg, ...) and colocated Python are off";
    return chosen;
  }
  std::vector<std::string> tried;
  for (const PythonCandidate& candidate : candidates) {
    absl::StatusOr<PythonModules> modules = probe(candidate.path);
    if (!modules.ok() || !modules->jaxlib) {
      const std::string why =
          modules.ok() ? "has no jaxlib" : std::string(modules.status().message());
      tried.push_back(absl::StrCat(candidate.path, " (", candidate.source, ": ", why, ")"));
      // One the operator named is taken as meant: say what is wrong with it, and look no
      // further.
      if (candidate.source == "--python" || candidate.source == "$SWITCHYARD_WORKER_PYTHON") break;
      continue;
    }
    chosen.path = candidate.path;
    chosen.source = candidate.source;
    const std::string missing = Missing(*modules);
    if (!missing.empty()) {
      chosen.colocated_off =
          absl::StrCat("this worker's Python (", chosen.path, ") lacks ", missing,
                       ": start it with --python=<a Python with jax, cloudpickle and switchyard>");
    }
    chosen.summary = absl::StrCat(
        "Python for jaxlib's kernels and colocated Python: ", chosen.path, " (", chosen.source, ")",
        missing.empty() ? "" : absl::StrCat("; colocated Python is off: it lacks ", missing));
    return chosen;
  }
  chosen.colocated_off = absl::StrCat("this worker found no Python with jaxlib: ", kHowToTurnOn);
  chosen.summary = absl::StrCat(
      "no Python with jaxlib (tried: ",
      tried.empty() ? std::string("nothing to try") : absl::StrJoin(tried, "; "),
      "): jaxlib's kernels (jnp.linalg, ...) and colocated Python are off; to turn them on, ",
      kHowToTurnOn);
  return chosen;
}

absl::StatusOr<PythonModules> ProbePython(const std::string& python, absl::Duration timeout) {
  if (access(python.c_str(), X_OK) != 0) {
    return absl::NotFoundError("not an executable");
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  std::vector<std::string> args = {python, "-c", kProbeScript};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawned != 0) {
    close(pipe_fds[0]);
    return absl::UnavailableError(absl::StrCat("cannot run it: ", std::strerror(spawned)));
  }
  std::string output;
  const absl::Time deadline = absl::Now() + timeout;
  bool timed_out = false;
  while (true) {
    pollfd p{pipe_fds[0], POLLIN, 0};
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) {
      timed_out = true;
      break;
    }
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // the deadline is checked above
    char chunk[4096];
    const ssize_t n = read(pipe_fds[0], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (output.size() < 64 * 1024) output.append(chunk, n);
  }
  close(pipe_fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return absl::UnavailableError(
        absl::StrCat("gave no answer within ", absl::FormatDuration(timeout)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::UnavailableError(
        absl::StrCat("did not run: ", absl::StripAsciiWhitespace(output.substr(0, 300))));
  }
  std::vector<absl::string_view> flags =
      absl::StrSplit(absl::StripAsciiWhitespace(output), ' ', absl::SkipEmpty());
  if (flags.size() != 4) {
    return absl::UnavailableError(absl::StrCat("unexpected answer: ", output.substr(0, 300)));
  }
  PythonModules modules;
  modules.jaxlib = flags[0] == "1";
  modules.jax = flags[1] == "1";
  modules.cloudpickle = flags[2] == "1";
  modules.switchyard = flags[3] == "1";
  return modules;
}

WorkerPython FindWorkerPython(const std::string& flag) {
  const char* env = std::getenv("SWITCHYARD_WORKER_PYTHON");
  std::string binary_dir;
  char self[4096] = {};
  if (const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1); n > 0) {
    binary_dir = std::string(self, n);
    binary_dir = binary_dir.substr(0, binary_dir.rfind('/'));
  }
#ifdef SWITCHYARD_BUILD_PYTHON
  const std::string build_python = SWITCHYARD_BUILD_PYTHON;
#else
  const std::string build_python;
#endif
  return ChooseWorkerPython(
      WorkerPythonCandidates(flag, env == nullptr ? "" : env, binary_dir, build_python),
      [](const std::string& python) { return ProbePython(python, kProbeTimeout); });
}

}  // namespace switchyard::worker
