#pragma once

// Time as a dependency, so heartbeat and health logic can be tested with a fake.

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace switchyard {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace switchyard
