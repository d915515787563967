#include "common/accept.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace switchyard {

absl::StatusOr<int> AcceptNext(int listen_fd, int flags, absl::string_view where,
                               const std::function<bool()>& stopping) {
  while (!stopping()) {
    const int fd = accept4(listen_fd, nullptr, nullptr, flags);
    if (fd >= 0) return fd;
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (stopping()) break;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      SY_LOG(Warning) << "accept on " << where << ": " << std::strerror(errno);
      absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    return absl::UnavailableError(absl::StrCat("accept on ", where, ": ", std::strerror(errno)));
  }
  return absl::CancelledError("stopping");
}

}  // namespace switchyard
