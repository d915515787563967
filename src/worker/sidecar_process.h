#pragma once

// One colocated Python sidecar process (python -m switchyard.sidecar) and the message
// channel to it: a socket pair on its stdin and stdout, each message its length
// (4 bytes, little-endian) and a serialized proto (switchyard/sidecar.proto). Calls are
// one at a time; not thread-safe (ColocatedCalls serializes them).

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "switchyard/sidecar.pb.h"
#include "worker/sidecar_sandbox.h"

namespace switchyard::worker {

class SidecarProcess {
 public:
  // Starts `python -m switchyard.sidecar`; `label` names it in logs (and `ps`: no
  // session id). `directory` (may be empty) is its own, for the arrays it is handed and
  // its temporary files (TMPDIR). `sandbox` (null: none) confines it (SpawnSandboxed;
  // its own directory must be `directory`). FAILED_PRECONDITION when the process cannot
  // be started.
  static absl::StatusOr<std::unique_ptr<SidecarProcess>> Spawn(
      const std::string& python, const std::string& label, const std::string& directory = "",
      const SandboxPolicy* sandbox = nullptr);
  // Stops the process (SIGKILL) and reaps it.
  ~SidecarProcess();
  SidecarProcess(const SidecarProcess&) = delete;
  SidecarProcess& operator=(const SidecarProcess&) = delete;

  // Sends `request` and waits for its reply until `deadline`. When the process exits
  // meanwhile, breaks the protocol or runs past the deadline, it is stopped for good
  // (`alive()` turns false) and the error says how it ended: UNAVAILABLE for an exit
  // or a crash, DEADLINE_EXCEEDED for a deadline. `cancelled` (may be null) is asked
  // every 200 ms while waiting: once it says true (the caller has gone), the process is
  // stopped too and the answer is CANCELLED. `pass_fds` (at most kPassFdsMax) go with
  // the request (SCM_RIGHTS): the sidecar gets its own copies of the descriptors.
  static constexpr int kPassFdsMax = 4;
  absl::StatusOr<SidecarReply> Call(const SidecarRequest& request, absl::Time deadline,
                                    const std::function<bool()>& cancelled = nullptr,
                                    absl::Span<const int> pass_fds = {});

  bool alive() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  SidecarProcess(pid_t pid, int fd, std::string label, bool through_init)
      : pid_(pid), fd_(fd), label_(std::move(label)), through_init_(through_init) {}
  // "exited with status 1", "was killed by signal 11 (Segmentation fault)".
  std::string HowItEnded(int status) const;
  absl::Status Send(const std::string& bytes, absl::Time deadline,
                    const std::function<bool()>& cancelled, absl::Span<const int> pass_fds);
  absl::Status Receive(char* out, size_t size, absl::Time deadline,
                       const std::function<bool()>& cancelled);
  // Waits until `fd_` is ready for `events`: OK, or the deadline's or cancellation's
  // error.
  absl::Status WaitFor(short events, absl::Time deadline, const std::function<bool()>& cancelled);
  // Kills and reaps the process; returns how it ended ("exited with status 1", "was
  // killed by signal 11").
  std::string Stop();
  absl::Status Broken(absl::Status why);

  pid_t pid_;
  int fd_;
  std::string label_;
  const bool through_init_;  // pid_ is the sandbox's init (RunSidecarInit)
};

}  // namespace switchyard::worker
