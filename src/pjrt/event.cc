#include "pjrt/event.h"

#include <utility>

#include "pjrt/c_api.h"

namespace switchyard::pjrt {

Event::~Event() {
  if (event_ == nullptr) return;
  Args<PJRT_Event_Destroy_Args> args;
  args->event = event_;
  (void)SY_PJRT_CALL(api_, Event_Destroy, args.get());
}

absl::Status Event::Await() {
  if (event_ == nullptr) return absl::OkStatus();
  Args<PJRT_Event_Await_Args> args;
  args->event = event_;
  return SY_PJRT_CALL(api_, Event_Await, args.get());
}

namespace {

struct Continuation {
  const PJRT_Api* api;
  PJRT_Event* event;
  std::function<void(absl::Status)> done;
};

void OnEventReady(PJRT_Error* error, void* user_arg) {
  auto* continuation = static_cast<Continuation*>(user_arg);
  continuation->done(ToStatus(continuation->api, error));
  Event(continuation->api, continuation->event);  // destroys the event
  delete continuation;
}

}  // namespace

PJRT_Event* Event::Then(const PJRT_Api* api, PJRT_Event* event,
                        std::function<void(absl::Status)> done) {
  if (event == nullptr) {
    done(absl::OkStatus());
    return nullptr;
  }
  auto* continuation = new Continuation{api, event, std::move(done)};
  Args<PJRT_Event_OnReady_Args> args;
  args->event = event;
  args->callback = &OnEventReady;
  args->user_arg = continuation;
  if (SY_PJRT_CALL(api, Event_OnReady, args.get()).ok()) return nullptr;
  delete continuation;
  return event;
}

void Event::Then(std::unique_ptr<Event> event, std::function<void(absl::Status)> done) {
  if (event == nullptr) {
    done(absl::OkStatus());
    return;
  }
  auto shared = std::make_shared<std::function<void(absl::Status)>>(std::move(done));
  PJRT_Event* raw = std::exchange(event->event_, nullptr);
  PJRT_Event* back = Then(event->api_, raw, [shared](absl::Status status) { (*shared)(status); });
  if (back == nullptr) return;
  Event owned(event->api_, back);
  (*shared)(owned.Await());
}

}  // namespace switchyard::pjrt
