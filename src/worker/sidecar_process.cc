#include "worker/sidecar_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/huge_pages.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/worker.h"

extern char** environ;

namespace switchyard::worker {
namespace {

int RemainingMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms, 1 << 30)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SidecarProcess>> SidecarProcess::Spawn(
    const std::string& python, const std::string& label, const std::string& directory,
    const SandboxPolicy* sandbox) {
  if (sandbox != nullptr && sandbox->own_directory != directory) {
    return absl::InvalidArgumentError("a sandboxed sidecar runs in its sandbox's own directory");
  }
  std::vector<std::string> args = {python, "-m", "switchyard.sidecar", "--label", label};
  if (!directory.empty()) args.insert(args.end(), {"--directory", directory});
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    // A token is the client's, not the next tenant's; temporary files go to the
    // sidecar's own directory.
    if (absl::StartsWith(*entry, "SWITCHYARD_TOKEN=") ||
        (!directory.empty() && absl::StartsWith(*entry, "TMPDIR="))) {
      continue;
    }
    env.push_back(*entry);
  }
  if (!directory.empty()) env.push_back(absl::StrCat("TMPDIR=", directory, "/tmp"));
  // NumPy asks for huge pages for large arrays; where they cost more than they save
  // (common/huge_pages.h), the sidecar's arrays, like this worker's buffers, do without:
  // a call's input copies into fresh huge pages took three times the copy itself.
  if (!HostHugePages().use && std::getenv("NUMPY_MADVISE_HUGEPAGE") == nullptr) {
    env.push_back("NUMPY_MADVISE_HUGEPAGE=0");
  }

  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  pid_t pid = 0;
  if (sandbox != nullptr) {
    // The sandbox's first process is our own small init, which runs the sidecar.
    char self[4096] = {};
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
      close(fds[0]);
      close(fds[1]);
      return absl::FailedPreconditionError("cannot find this program (/proc/self/exe)");
    }
    args.insert(args.begin(), {std::string(self, n), kSidecarInitCommand});
    absl::StatusOr<SandboxedProcess> started = SpawnSandboxed(args, env, fds[1], *sandbox);
    close(fds[1]);
    if (!started.ok()) {
      close(fds[0]);
      return started.status();
    }
    pid = started->pid;
  } else {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // The child's stdin and stdout are its end (dup2 clears close-on-exec there); its
    // stderr is ours, so what the functions print lands in the worker's log.
    posix_spawn_file_actions_adddup2(&actions, fds[1], 0);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (std::string& entry : env) envp.push_back(entry.data());
    envp.push_back(nullptr);
    const int spawned =
        posix_spawn(&pid, python.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    if (spawned != 0) {
      close(fds[0]);
      return absl::FailedPreconditionError(
          absl::StrCat("cannot start the sidecar's Python ", python, ": ", std::strerror(spawned)));
    }
  }
  return std::unique_ptr<SidecarProcess>(
      new SidecarProcess(pid, fds[0], label, /*through_init=*/sandbox != nullptr));
}

std::string SidecarProcess::HowItEnded(int status) const {
  int signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  // The sandbox's first process passes on a signal as 128 + N (RunSidecarInit).
  if (through_init_ && WIFEXITED(status) && WEXITSTATUS(status) > 128) {
    signal = WEXITSTATUS(status) - 128;
  }
  if (signal != 0) {
    return absl::StrCat("was killed by signal ", signal, " (", strsignal(signal), ")");
  }
  return WIFEXITED(status) ? absl::StrCat("exited with status ", WEXITSTATUS(status)) : "exited";
}

SidecarProcess::~SidecarProcess() {
  if (pid_ > 0) Stop();
}

std::string SidecarProcess::Stop() {
  std::string how = "was stopped";
  if (pid_ > 0) {
    int status = 0;
    // Reaps one that already ended (and says how); else kills it.
    pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    } else if (done == pid_) {
      how = HowItEnded(status);
    }
    pid_ = -1;
  }
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  return how;
}

absl::Status SidecarProcess::Broken(absl::Status why) {
  // Waits a moment for an exiting process so the error can say how it ended.
  if (pid_ > 0 && absl::IsUnavailable(why)) {
    for (int i = 0; i < 50; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) != 0) {
        const std::string how = HowItEnded(status);
        pid_ = -1;
        Stop();
        return absl::UnavailableError(absl::StrCat("the sidecar ", how));
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  const std::string how = Stop();
  return absl::Status(why.code(), absl::StrCat(why.message(), "; the sidecar ", how));
}

absl::Status SidecarProcess::WaitFor(short events, absl::Time deadline,
                                     const std::function<bool()>& cancelled) {
  constexpr int kCancelPollMs = 200;
  while (true) {
    pollfd p{fd_, events, 0};
    int wait = RemainingMs(deadline);
    if (cancelled != nullptr && (wait < 0 || wait > kCancelPollMs)) wait = kCancelPollMs;
    const int ready = poll(&p, 1, wait);
    if (ready > 0) return absl::OkStatus();
    if (ready < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (absl::Now() >= deadline)
      return absl::DeadlineExceededError("the call ran past its deadline");
    if (cancelled != nullptr && cancelled()) return absl::CancelledError("its caller went away");
  }
}

absl::Status SidecarProcess::Send(const std::string& bytes, absl::Time deadline,
                                  const std::function<bool()>& cancelled,
                                  absl::Span<const int> pass_fds) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    SY_RETURN_IF_ERROR(WaitFor(POLLOUT, deadline, cancelled));
    iovec data{const_cast<char*>(bytes.data() + sent), bytes.size() - sent};
    msghdr message{};
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kPassFdsMax)];
    if (sent == 0 && !pass_fds.empty()) {  // with the first byte: the receiver reads it first
      const size_t fds_bytes = sizeof(int) * pass_fds.size();
      message.msg_control = control;
      message.msg_controllen = CMSG_SPACE(fds_bytes);
      cmsghdr* header = CMSG_FIRSTHDR(&message);
      header->cmsg_level = SOL_SOCKET;
      header->cmsg_type = SCM_RIGHTS;
      header->cmsg_len = CMSG_LEN(fds_bytes);
      std::memcpy(CMSG_DATA(header), pass_fds.data(), fds_bytes);
    }
    const ssize_t n = sendmsg(fd_, &message, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(absl::StrCat("write to the sidecar: ", std::strerror(errno)));
    }
    sent += n;
  }
  return absl::OkStatus();
}

absl::Status SidecarProcess::Receive(char* out, size_t size, absl::Time deadline,
                                     const std::function<bool()>& cancelled) {
  size_t got = 0;
  while (got < size) {
    SY_RETURN_IF_ERROR(WaitFor(POLLIN, deadline, cancelled));
    const ssize_t n = recv(fd_, out + got, size - got, 0);
    if (n == 0) return absl::UnavailableError("the sidecar closed its end");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(absl::StrCat("read from the sidecar: ", std::strerror(errno)));
    }
    got += n;
  }
  return absl::OkStatus();
}

absl::StatusOr<SidecarReply> SidecarProcess::Call(const SidecarRequest& request,
                                                  absl::Time deadline,
                                                  const std::function<bool()>& cancelled,
                                                  absl::Span<const int> pass_fds) {
  if (pid_ <= 0) return absl::UnavailableError("the sidecar has stopped");
  if (pass_fds.size() > kPassFdsMax) {
    return absl::InvalidArgumentError(absl::StrCat(pass_fds.size(), " descriptors for a call"));
  }
  std::string message;
  request.SerializeToString(&message);
  if (message.size() > static_cast<size_t>(limits::kSidecarMessageBytesMax)) {
    return absl::InvalidArgumentError(absl::StrCat("a sidecar request of ", message.size(),
                                                   " bytes is past the limit of ",
                                                   limits::kSidecarMessageBytesMax));
  }
  const uint32_t size = static_cast<uint32_t>(message.size());
  std::string framed(4, '\0');
  for (int i = 0; i < 4; ++i) framed[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  framed += message;
  absl::Status sent = Send(framed, deadline, cancelled, pass_fds);
  if (!sent.ok()) return Broken(sent);
  unsigned char header[4];
  absl::Status received = Receive(reinterpret_cast<char*>(header), 4, deadline, cancelled);
  if (!received.ok()) return Broken(received);
  const uint32_t length =
      header[0] | (header[1] << 8) | (header[2] << 16) | (static_cast<uint32_t>(header[3]) << 24);
  if (length > static_cast<uint64_t>(limits::kSidecarMessageBytesMax)) {
    return Broken(absl::InternalError(
        absl::StrCat("the sidecar sent a ", length, "-byte message, past the limit")));
  }
  std::string body(length, '\0');
  received = Receive(body.data(), length, deadline, cancelled);
  if (!received.ok()) return Broken(received);
  SidecarReply reply;
  if (!reply.ParseFromString(body) || reply.call() != request.call()) {
    return Broken(absl::InternalError("the sidecar broke the protocol"));
  }
  return reply;
}

}  // namespace switchyard::worker
