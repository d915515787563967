#pragma once

// A gRPC server's door on a Unix-domain socket, with the caller checked before gRPC
// sees a byte: only this process's user (and root) get in. gRPC's own "unix:" listener
// cannot say who connected; this one accepts each connection itself, reads the peer's
// credentials (SO_PEERCRED), refuses other users, and hands the rest to the server.
// Calls on such a connection carry the peer name "fd:<n>"; `UnixPeer` turns it back
// into the process at the other end, so a request can be tied to the client process
// that opened a session (no capability from a number).
//
// The socket's directory must not be writable by other users (else one could put a
// socket of theirs at the path before we bind, or after we stop), and the socket is
// made readable and writable by its owner only.

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace grpc {
class Server;
}

namespace switchyard {

inline constexpr char kUnixScheme[] = "unix:";

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class UnixListener {
 public:
  // Binds `path` and serves it through `server` (started, with no other listener
  // required). A socket file left there by a process that is gone is replaced; a live
  // one is UNAVAILABLE (in use). FAILED_PRECONDITION: the directory is missing, or
  // others may write it.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Start(const std::string& path,
                                                             grpc::Server* server);
  // The same door for a server of our own: `take` gets each admitted connection
  // (non-blocking, close-on-exec) and owns it from then on. Called on the accept thread.
  using Take = std::function<void(int fd, const PeerCredentials& peer)>;
  static absl::StatusOr<std::unique_ptr<UnixListener>> Start(const std::string& path, Take take);
  // Stops accepting and removes the socket file (if it is still ours).
  ~UnixListener();
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // Idempotent. After it returns, no connection is handed to the server: call it before
  // the server shuts down.
  void Stop();

  // Connections refused so far (another user's).
  int64_t refused() const { return refused_.load(); }

 private:
  UnixListener(std::string path, int fd, Take take, ino_t inode)
      : path_(std::move(path)), fd_(fd), take_(std::move(take)), inode_(inode) {}
  void AcceptLoop();

  const std::string path_;
  const int fd_;
  const Take take_;
  const ino_t inode_;  // of the socket file we made, so we never remove another's
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> refused_{0};
  std::thread thread_;
};

// The process at the other end of a connection a UnixListener accepted, by the peer
// name gRPC gives its calls ("fd:<n>"); nullopt for any other peer (TCP, in-process).
std::optional<PeerCredentials> UnixPeer(absl::string_view grpc_peer);

}  // namespace switchyard
