#include "worker/launch_gate.h"

#include <utility>

namespace switchyard::worker {

uint64_t LaunchGate::Arrive(FairShare::Request request, bool multi_device) {
  Kind kind;
  kind.plain = options_.host_devices && !request.in_order;
  kind.multi_device = multi_device;
  const uint64_t ticket = fair_.Arrive(std::move(request));
  kinds_[ticket] = kind;
  return ticket;
}

bool LaunchGate::MayStart(uint64_t ticket, absl::Time now) const {
  auto it = kinds_.find(ticket);
  if (it == kinds_.end() || starting_ || full_) return false;
  const Kind& kind = it->second;
  if (kind.multi_device && options_.host_devices && multi_device_running_) return false;
  if (fair_.NextInOrder() != 0) return fair_.NextInOrder() == ticket;
  if (fair_.Next() != ticket) return false;
  // A flow counts a moment after its last launch too, so that it does not find a window
  // full of the others' work each time its client is a little late.
  if (fair_.Competing(now) < 2) return true;
  if (in_flight_ >= 2 && fair_.queued() >= absl::ToDoubleSeconds(options_.queue)) return false;
  return !(kind.plain && plain_in_flight_ >= options_.host_competing);
}

void LaunchGate::Start(uint64_t ticket, absl::Time now) {
  fair_.Start(ticket, now);
  starting_ = true;
}

void LaunchGate::HandedOver(uint64_t ticket) {
  starting_ = false;
  const Kind& kind = kinds_[ticket];
  ++in_flight_;
  if (kind.plain) ++plain_in_flight_;
  if (in_flight_ >= options_.window) full_ = true;
  if (kind.multi_device && options_.host_devices) multi_device_running_ = true;
}

void LaunchGate::Abandon(uint64_t ticket) {
  starting_ = false;
  fair_.Withdraw(ticket);
  kinds_.erase(ticket);
}

double LaunchGate::Finish(uint64_t ticket, absl::Time now, absl::Time inputs_ready) {
  auto it = kinds_.find(ticket);
  if (it == kinds_.end()) return 0;
  const Kind kind = it->second;
  kinds_.erase(it);
  --in_flight_;
  if (kind.plain) --plain_in_flight_;
  if (in_flight_ <= options_.window / 2) full_ = false;
  if (kind.multi_device) multi_device_running_ = false;
  return fair_.Finish(ticket, now, inputs_ready);
}

}  // namespace switchyard::worker
