#pragma once

// A PJRT event: completion of an asynchronous transfer or launch.

#include <functional>
#include <memory>

#include "absl/status/status.h"

struct PJRT_Api;
struct PJRT_Event;

namespace switchyard::pjrt {

class Event {
 public:
  // Takes ownership of `event` (may be nullptr: an event that is already done).
  Event(const PJRT_Api* api, PJRT_Event* event) : api_(api), event_(event) {}
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Blocks until the event is ready; returns the error it carries, if any.
  absl::Status Await();

  // Takes `event` (nullptr: already done) and runs `done` with its status once it is
  // ready: on a plugin thread, or before returning; then destroys it. If the plugin
  // cannot call back, nothing runs and the event is handed back (otherwise nullptr):
  // the caller decides whether waiting for it here is safe.
  [[nodiscard]] static PJRT_Event* Then(const PJRT_Api* api, PJRT_Event* event,
                                        std::function<void(absl::Status)> done);
  // The same for an owned event; one whose plugin cannot call back is waited for here.
  static void Then(std::unique_ptr<Event> event, std::function<void(absl::Status)> done);

 private:
  const PJRT_Api* api_;
  PJRT_Event* event_;
};

}  // namespace switchyard::pjrt
