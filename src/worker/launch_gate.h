#pragma once

// When a launch may be handed to the plugin. Launches wait here in FairShare's order,
// and the gate keeps the devices fed without one flow's queue crowding out another's:
//
// - At most `window` launches handed over and not finished; once full, nothing more
//   goes until half of them are done (a waiting thread wakes once per half window).
// - A flow alone keeps the whole window: holding it back would only make a chain of
//   launches waiting on transfers queue behind itself.
// - While flows compete (FairShare::Competing), past two launches in flight nothing more
//   goes while `queue` of estimated device time is queued; on host devices (CPU) at most
//   `host_competing` launches that may be held back go at once (the CPU client runs any
//   number side by side on the same cores, in no fair order).
// - Launches not to be reordered (FairShare::Request::in_order) go first come, first
//   served, ahead of the others, and are never held back for another flow's sake.
// - On host devices, a launch spanning several devices goes once the previous such
//   launch is done: the CPU client runs their device parts on one small shared pool,
//   where parts of two launches can deadlock waiting in a collective.
// - One launch is handed over at a time: the order of handovers is the plugin's order.
//
// Pure logic: time is passed in. Not thread-safe (the executor locks around it).

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "common/limits.h"
#include "worker/fair_share.h"

namespace switchyard::worker {

class LaunchGate {
 public:
  struct Options {
    bool host_devices = false;
    int64_t window = limits::kLaunchWindow;
    int64_t host_competing = limits::kHostLaunchesCompeting;
    absl::Duration queue = absl::Milliseconds(limits::kLaunchQueueMs);
  };

  explicit LaunchGate(Options options) : options_(options) {}

  // A launch arrives to wait for its turn; returns its ticket (never 0).
  // `multi_device`: it spans several devices of this host.
  uint64_t Arrive(FairShare::Request request, bool multi_device);
  // Whether `ticket` (waiting) may be handed over now.
  bool MayStart(uint64_t ticket, absl::Time now) const;
  // `ticket`, whose turn it is, is being handed over: nothing else starts until
  // `HandedOver` or `Abandon`.
  void Start(uint64_t ticket, absl::Time now);
  // The plugin has it: it holds its place in the window until `Finish`.
  void HandedOver(uint64_t ticket);
  // It was not handed over (an error, a cancelled session): withdrawn, its flow given
  // its estimate back.
  void Abandon(uint64_t ticket);
  // A handed-over launch is done on all its devices; returns the device seconds its flow
  // was charged (FairShare::Finish, from `inputs_ready` if later than its start).
  double Finish(uint64_t ticket, absl::Time now, absl::Time inputs_ready = absl::InfinitePast());
  // Forgets what `program`'s launches cost (it was deleted).
  void Forget(uint64_t program) { fair_.Forget(program); }

  const FairShare& fair() const { return fair_; }
  int64_t in_flight() const { return in_flight_; }

 private:
  struct Kind {
    bool plain = false;  // may be held back while flows compete (host devices only)
    bool multi_device = false;
  };

  const Options options_;
  FairShare fair_;
  absl::flat_hash_map<uint64_t, Kind> kinds_;  // arrived and not finished or abandoned
  int64_t in_flight_ = 0;                      // handed over, not finished
  int64_t plain_in_flight_ = 0;                // of those, the plain ones
  bool full_ = false;
  bool starting_ = false;
  bool multi_device_running_ = false;
};

}  // namespace switchyard::worker
