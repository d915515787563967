// What the resource manager decodes: worker registrations, heartbeats, key-value puts
// and gets, gang numbering, proxies' reports (from any process that reaches its port) and its own
// state file (from disk, after a crash mid-anything). Input: one selector byte, then the message.
// The membership persists across inputs (a registration is followed by others), and is exported and
// restored as the RM's state file is.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "fuzz/quiet.h"
#include "rm/gang_numbers.h"
#include "rm/kv_store.h"
#include "rm/membership.h"
#include "rm/proxy_reports.h"

namespace {

using switchyard::rm::Membership;

struct World {
  std::unique_ptr<Membership> membership = std::make_unique<Membership>(absl::Seconds(2));
  switchyard::rm::KvStore kv;
  switchyard::rm::GangNumbers gangs{1, 64};
  switchyard::rm::ProxyReports proxies{absl::Seconds(10), 4};
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
  switch (data[0] % 7) {
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
      world.kv.Get(request.key(), world.now, world.now, [](absl::StatusOr<std::string>) {});
      break;
    }
    case 4: {  // a get that may wait, expire or be cancelled by its client
      switchyard::KeyValueGetRequest request;
      if (!request.ParseFromArray(body, body_size)) return -1;
      const int64_t wait_ms = std::clamp<int64_t>(request.timeout_ms(), 0, 1000);
      const switchyard::rm::KvStore::WaitId id =
          world.kv.Get(request.key(), world.now, world.now + absl::Milliseconds(wait_ms),
                       [](absl::StatusOr<std::string>) {});
      if (request.timeout_ms() % 3 == 1) (void)world.kv.Cancel(id);
      break;
    }
    case 5: {  // numbers, voids and questions, as RmService passes them on (hosts distinct)
      switchyard::NumberGangRequest request;
      if (!request.ParseFromArray(body, body_size)) return -1;
      std::vector<switchyard::rm::GangNumbers::HostKey> hosts;
      for (const switchyard::HostRef& host : request.hosts()) {
        hosts.emplace_back(host.slice_index(), host.host_index());
      }
      std::sort(hosts.begin(), hosts.end());
      hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
      if (hosts.empty()) return -1;
      auto& gangs = world.gangs;
      const std::vector<uint64_t> numbers = gangs.Number(request.proxy(), request.session(), hosts);
      for (size_t i = 0; i < hosts.size(); ++i) {
        (void)gangs.Voids(hosts[i], request.session(), request.proxy());
        (void)gangs.Void(hosts[i], numbers[i] ^ (request.session() & 1), request.proxy(),
                         request.session());
        if (request.session() % 4 == 1) gangs.Passed(hosts[i], request.proxy());
        if (request.session() % 8 == 2) (void)gangs.Restarted(hosts[i]);
      }
      if (request.session() % 3 == 0) gangs.SessionEnded(request.proxy(), request.session());
      if (request.session() % 5 == 0) gangs.ProxyGone(request.proxy());
      break;
    }
    case 6: {
      switchyard::ReportProxyRequest request;
      if (!request.ParseFromArray(body, body_size)) return -1;
      world.proxies.Report(request, world.now);
      (void)world.proxies.List(world.now);
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
  world.kv.Expire(world.now);
  return 0;
}
