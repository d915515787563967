// What the resource manager decodes: worker registrations, heartbeats, key-value puts
// (from any process that reaches its port) and its own state file (from disk, after a
// crash mid-anything). Input: one selector byte, then the message. The membership
// persists across inputs (a registration is followed by others), and is exported and
// restored as the RM's state file is.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "fuzz/quiet.h"
#include "rm/kv_store.h"
#include "rm/membership.h"

namespace {

using switchyard::rm::Membership;

struct World {
  std::unique_ptr<Membership> membership = std::make_unique<Membership>(absl::Seconds(2));
  switchyard::rm::KvStore kv;
  absl::Time now = absl::UnixEpoch() + absl::Hours(1);
  uint64_t incarnation = 0;
};

// A bounded world: started afresh now and then, as a restarted RM would be.
World& TheWorld() {
  static auto* world = new std::unique_ptr<World>;
  static int inputs = 0;
  if (*world == nullptr || ++inputs % 500 == 0) *world = std::make_unique<World>();
  return **world;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return -1;
  World& world = TheWorld();
  world.now += absl::Milliseconds(data[0]);
  const uint8_t* body = data + 1;
  const int body_size = static_cast<int>(size - 1);
  switch (data[0] % 4) {
    case 0: {
      switchyard::RegisterWorkerRequest request;
      if (!request.ParseFromArray(body, body_size)) return -1;
      (void)world.membership->Register(request, ++world.incarnation, world.now);
      break;
    }
    case 1: {
      switchyard::HeartbeatRequest request;
      if (!request.ParseFromArray(body, body_size)) return -1;
      (void)world.membership->Heartbeat(request.incarnation(), world.now);
      (void)world.membership->Sweep(world.now);
      break;
    }
    case 2: {
      switchyard::KeyValuePutRequest request;
      if (!request.ParseFromArray(body, body_size)) return -1;
      (void)world.kv.Put(request.key(), request.value(), request.allow_overwrite());
      (void)world.kv.Get(request.key(), absl::ZeroDuration());
      break;
    }
    case 3: {
      switchyard::RmState state;
      if (!state.ParseFromArray(body, body_size)) return -1;
      Membership restored(absl::Seconds(2));
      if (restored.Restore(state, world.now).ok()) {
        (void)restored.Snapshot(world.now);
        (void)restored.Export();
      }
      break;
    }
  }
  (void)world.membership->Snapshot(world.now);
  return 0;
}
