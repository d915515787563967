#include "worker/sidecar_sandbox.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/worker.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace switchyard::worker {
namespace {

// The child's steps, named in the error when one fails.
enum Step : int {
  kStdio,
  kUidMap,
  kPrivateMounts,
  kCloneWritable,
  kReadOnly,
  kSharedDirectory,
  kAttachWritable,
  kHide,
  kProc,
  kPrivileges,
  kDirectory,
  kExec,
  kProcState,  // not a failure: whether /proc is the sandbox's own
};

const char* StepName(int step) {
  switch (step) {
    case kStdio:
      return "set up its standard input and output";
    case kUidMap:
      return "map its user and group";
    case kPrivateMounts:
      return "make its mounts private";
    case kCloneWritable:
      return "keep a writable directory";
    case kReadOnly:
      return "make the file system read-only";
    case kSharedDirectory:
      return "cover the shared directory";
    case kAttachWritable:
      return "attach a writable directory";
    case kHide:
      return "hide a secret";
    case kProc:
      return "mount its /proc";
    case kPrivileges:
      return "drop its privileges";
    case kDirectory:
      return "enter its directory";
    case kExec:
      return "run the program";
    default:
      return "start";
  }
}

struct Report {
  int step;
  int error;
  int value;
};

// Everything the child uses, made before the clone: after it, only system calls
// (no allocation: another thread may have held the allocator's lock).
struct Plan {
  std::vector<std::string> strings;  // owns what the pointers below point to
  const char* setgroups = "deny";
  std::string uid_map;
  std::string gid_map;
  std::vector<const char*> writable;
  std::vector<const char*> hidden_directories;
  std::vector<const char*> hidden_files;
  std::string shared_directory;
  std::string own_directory;
  std::string placeholder;  // an empty file (mode 0) to bind over hidden files
  std::string tmpdir;
  std::vector<char*> argv;  // empty: exit 0 instead of running anything (CheckSandbox)
  std::vector<char*> envp;
  int stdio_fd = -1;
  int report_fd = -1;
};

[[noreturn]] void Fail(const Plan& plan, int step) {
  const Report report{step, errno, 0};
  (void)!write(plan.report_fd, &report, sizeof(report));
  _exit(127);
}

bool WriteFile(const char* path, const char* text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t size = std::strlen(text);
  const bool written = write(fd, text, size) == static_cast<ssize_t>(size);
  const int saved = errno;
  close(fd);
  errno = saved;
  return written;
}

int SetReadOnly(const char* path, unsigned int flags) {
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_RDONLY;
  return static_cast<int>(syscall(SYS_mount_setattr, AT_FDCWD, path, flags, &attr, sizeof(attr)));
}

int CloneTree(const char* path) {
  return static_cast<int>(
      syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
}

int Attach(int tree, const char* path) {
  return static_cast<int>(
      syscall(SYS_move_mount, tree, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH));
}

// The child, in its new namespaces. Async-signal-safe calls only.
[[noreturn]] void RunChild(const Plan& plan) {
  if (!plan.argv.empty() && (dup2(plan.stdio_fd, 0) < 0 || dup2(plan.stdio_fd, 1) < 0)) {
    Fail(plan, kStdio);
  }
  // No descriptor of the worker's survives the exec (its connections, its files).
  (void)syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  if (!WriteFile("/proc/self/setgroups", plan.setgroups) ||
      !WriteFile("/proc/self/uid_map", plan.uid_map.c_str()) ||
      !WriteFile("/proc/self/gid_map", plan.gid_map.c_str())) {
    Fail(plan, kUidMap);
  }
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) Fail(plan, kPrivateMounts);
  // Taken before the file system turns read-only: these stay writable.
  int own = CloneTree(plan.own_directory.c_str());
  if (own < 0) Fail(plan, kCloneWritable);
  int writable[64];
  const size_t writable_count = std::min<size_t>(plan.writable.size(), 64);
  for (size_t i = 0; i < writable_count; ++i) {
    writable[i] = CloneTree(plan.writable[i]);
    if (writable[i] < 0) Fail(plan, kCloneWritable);
  }
  if (SetReadOnly("/", AT_RECURSIVE) != 0) Fail(plan, kReadOnly);
  // Other sidecars' directories: covered by an empty file system that holds only ours
  // (and the placeholder), read-only once made.
  if (mount("tmpfs", plan.shared_directory.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
            "size=16k,mode=0755") != 0 ||
      mkdir(plan.own_directory.c_str(), 0700) != 0) {
    Fail(plan, kSharedDirectory);
  }
  const int placeholder =
      open(plan.placeholder.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0);
  if (placeholder < 0) Fail(plan, kSharedDirectory);
  close(placeholder);
  if (SetReadOnly(plan.shared_directory.c_str(), 0) != 0) Fail(plan, kSharedDirectory);
  if (Attach(own, plan.own_directory.c_str()) != 0) Fail(plan, kAttachWritable);
  for (size_t i = 0; i < writable_count; ++i) {
    if (Attach(writable[i], plan.writable[i]) != 0) Fail(plan, kAttachWritable);
  }
  // Last, so that no writable directory brings a secret back into view.
  for (const char* directory : plan.hidden_directories) {
    if (mount("tmpfs", directory, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "size=4k,mode=000") != 0) {
      Fail(plan, kHide);
    }
  }
  for (const char* file : plan.hidden_files) {
    if (mount(plan.placeholder.c_str(), file, nullptr, MS_BIND, nullptr) != 0 ||
        mount(nullptr, file, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
      Fail(plan, kHide);
    }
  }
  // Its own /proc shows its own processes only. A container that masks parts of /proc
  // refuses a new one; the worker then keeps itself from being traced instead.
  const bool own_proc =
      mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0;
  const Report state{kProcState, 0, own_proc ? 1 : 0};
  (void)!write(plan.report_fd, &state, sizeof(state));
  // Nothing to gain from here on: no capabilities (also none from executing anything as
  // uid 0 inside), no set-user-id programs.
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Fail(plan, kPrivileges);
  for (int cap = 0; cap <= 63; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) Fail(plan, kPrivileges);
  }
  (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &header, data) != 0) Fail(plan, kPrivileges);
  if (chdir(plan.own_directory.c_str()) != 0) Fail(plan, kDirectory);
  if (plan.argv.empty()) _exit(0);
  execve(plan.argv[0], plan.argv.data(), plan.envp.data());
  Fail(plan, kExec);
}

bool IsDirectory(const std::string& path, bool* exists) {
  struct stat st;
  *exists = stat(path.c_str(), &st) == 0;
  return *exists && S_ISDIR(st.st_mode);
}

}  // namespace

absl::StatusOr<SandboxedProcess> SpawnSandboxed(const std::vector<std::string>& argv,
                                                const std::vector<std::string>& env, int stdio_fd,
                                                const SandboxPolicy& policy) {
  if (policy.own_directory.empty() ||
      std::filesystem::path(policy.own_directory).parent_path() != policy.shared_directory) {
    return absl::InvalidArgumentError(
        "a sandbox's own directory must be a direct child of its shared directory");
  }
  Plan plan;
  plan.uid_map = absl::StrCat(geteuid(), " ", geteuid(), " 1");
  plan.gid_map = absl::StrCat(getegid(), " ", getegid(), " 1");
  plan.shared_directory = policy.shared_directory;
  plan.own_directory = policy.own_directory;
  plan.placeholder = absl::StrCat(policy.shared_directory, "/.hidden");
  plan.stdio_fd = stdio_fd;
  plan.strings.reserve(policy.writable.size() + policy.hidden.size() + argv.size() + env.size());
  for (const std::string& path : policy.writable) {
    bool exists = false;
    if (!IsDirectory(path, &exists) || plan.writable.size() >= 64) continue;
    plan.writable.push_back(plan.strings.emplace_back(path).c_str());
  }
  for (const std::string& path : policy.hidden) {
    bool exists = false;
    const bool directory = IsDirectory(path, &exists);
    if (!exists) continue;
    (directory ? plan.hidden_directories : plan.hidden_files)
        .push_back(plan.strings.emplace_back(path).c_str());
  }
  for (const std::string& arg : argv) plan.argv.push_back(plan.strings.emplace_back(arg).data());
  if (!plan.argv.empty()) plan.argv.push_back(nullptr);
  for (const std::string& entry : env) plan.envp.push_back(plan.strings.emplace_back(entry).data());
  plan.envp.push_back(nullptr);

  int report_pipe[2];
  if (pipe2(report_pipe, O_CLOEXEC) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  plan.report_fd = report_pipe[1];
  // A new process (not a thread: no CLONE_VM), like fork, in new namespaces; it is the
  // first process of its PID namespace.
  const long pid =
      syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | SIGCHLD,
              nullptr, nullptr, nullptr, 0);
  if (pid == 0) RunChild(plan);
  close(report_pipe[1]);
  if (pid < 0) {
    const int error = errno;
    close(report_pipe[0]);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make a sandbox for the sidecar: new user, mount and PID namespaces: ",
                     std::strerror(error)));
  }
  // Reports until the exec closes the pipe (or the child fails and exits).
  SandboxedProcess started;
  started.pid = static_cast<pid_t>(pid);
  Report failed{-1, 0, 0};
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool timed_out = false;
  while (true) {
    pollfd p{report_pipe[0], POLLIN, 0};
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) {
      timed_out = true;
      break;
    }
    const int ready = poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    Report report;
    const ssize_t n = read(report_pipe[0], &report, sizeof(report));
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(report))) break;  // end: the program runs
    if (report.step == kProcState) {
      started.own_proc = report.value != 0;
    } else {
      failed = report;
    }
  }
  close(report_pipe[0]);
  if (timed_out || failed.step >= 0) {
    kill(started.pid, SIGKILL);
    while (waitpid(started.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    if (timed_out) {
      return absl::FailedPreconditionError("the sidecar's sandbox took over 30 s to set up");
    }
    return absl::FailedPreconditionError(absl::StrCat("the sidecar's sandbox could not ",
                                                      StepName(failed.step), ": ",
                                                      std::strerror(failed.error)));
  }
  return started;
}

int RunSidecarInit(int argc, char** argv) {
  if (argc < 1) return 2;
  const pid_t sidecar = fork();
  if (sidecar < 0) {
    std::perror("sidecar-init: fork");
    return 1;
  }
  if (sidecar == 0) {
    execv(argv[0], argv);
    std::perror("sidecar-init: exec");
    _exit(127);
  }
  // The protocol is the sidecar's: the worker sees it end the moment the sidecar does.
  close(0);
  close(1);
  // Reaps every process that ends here (orphans come to the first process) until the
  // sidecar itself has ended; the sandbox's other processes end with us.
  while (true) {
    int status = 0;
    const pid_t ended = wait(&status);
    if (ended < 0 && errno == EINTR) continue;
    if (ended < 0) return 1;
    if (ended != sidecar) continue;
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
}

absl::StatusOr<SandboxedProcess> CheckSandbox() {
  char pattern[] = "/tmp/switchyard-sandbox-check-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  const std::string shared = pattern;
  const std::string own = shared + "/own";
  std::error_code ignored;
  std::filesystem::create_directory(own, ignored);
  SandboxPolicy policy;
  policy.shared_directory = shared;
  policy.own_directory = own;
  absl::StatusOr<SandboxedProcess> trial = SpawnSandboxed({}, {}, -1, policy);
  if (trial.ok()) {
    int status = 0;
    while (waitpid(trial->pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      trial = absl::FailedPreconditionError("the trial sandbox did not exit cleanly");
    }
  }
  std::filesystem::remove_all(shared, ignored);
  return trial;
}

}  // namespace switchyard::worker
