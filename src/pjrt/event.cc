#include "pjrt/event.h"

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

}  // namespace switchyard::pjrt
