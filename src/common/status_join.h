#pragma once

// Joins `count` asynchronous results into one: the returned callback is to be called
// `count` times (from any threads); the last call runs `done` with the first error
// among them, or OK. `count` must be at least 1.

#include <cstddef>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace switchyard {

inline std::function<void(absl::Status)> JoinStatuses(size_t count,
                                                      std::function<void(absl::Status)> done) {
  struct State {
    State(size_t count, std::function<void(absl::Status)> done)
        : left(count), done(std::move(done)) {}
    absl::Mutex mutex;
    size_t left ABSL_GUARDED_BY(mutex);
    absl::Status first_error ABSL_GUARDED_BY(mutex);
    const std::function<void(absl::Status)> done;
  };
  auto state = std::make_shared<State>(count, std::move(done));
  return [state](absl::Status status) {
    absl::Status result;
    {
      absl::MutexLock lock(&state->mutex);
      if (state->first_error.ok()) state->first_error = std::move(status);
      if (--state->left > 0) return;
      result = state->first_error;
    }
    state->done(std::move(result));
  };
}

}  // namespace switchyard
