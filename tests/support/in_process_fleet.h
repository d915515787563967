#pragma once

// A whole fleet in this process: a real RM and, one slice each, either real workers
// (the PJRT plugin named by SWITCHYARD_TEST_PLUGIN, the real Executor and BufferStore)
// or fake ones (support/fake_worker.h: no plugin, faults on cue), reached over gRPC's
// in-process transport: no socket is opened. For unit tests and fuzzers of what sits
// on top of the workers (the proxy's sessions).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proxy/fleet.h"
#include "rm/rm.h"
#include "support/fake_worker.h"
#include "worker/worker.h"

namespace switchyard::test_support {

// y = x + 1 over f32[4], as StableHLO text (the CPU plugin reads text and bytecode).
inline constexpr char kAddOneProgram[] = R"(
module @add_one attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>) {
    %c = stablehlo.constant dense<1.0> : tensor<4xf32>
    %0 = stablehlo.add %arg0, %c : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
)";

// The plugin the tests load, or nullptr when SWITCHYARD_TEST_PLUGIN is unset.
const char* TestPlugin();

class InProcessFleet {
 public:
  InProcessFleet() = default;
  ~InProcessFleet();
  InProcessFleet(const InProcessFleet&) = delete;
  InProcessFleet& operator=(const InProcessFleet&) = delete;

  // Starts the RM and `slices` workers of `devices_per_worker` CPU devices, and a proxy
  // fleet view that sees every device up (waits up to 10 s for it).
  absl::Status Start(int slices, int devices_per_worker);
  // The same with fake workers that speak worker protocol `protocol_version`.
  absl::Status StartFake(int slices, int devices_per_worker, uint32_t protocol_version);
  // For fuzzers, which have no way to fail but to stop.
  void StartOrAbort(int slices, int devices_per_worker);

  proxy::Fleet* fleet() { return fleet_.get(); }
  std::string worker_address(int slice) const {
    return fakes_.empty() ? workers_[slice]->address() : fakes_[slice]->address();
  }
  // The fake worker of `slice` (StartFake only).
  FakeWorker* fake(int slice) { return fakes_[slice].get(); }
  // The worker of `slice` stops serving, as if it had crashed (the object stays until
  // the fleet goes, after the proxy's connections).
  void StopWorker(int slice);
  // Waits up to 10 s until the proxy's connection to `slice` is down.
  bool WaitDown(int slice);

 private:
  std::unique_ptr<rm::ResourceManagerServer> rm_;
  // Starts the RM, then one worker a slice with `start_one(slice)`, each once the proxy
  // sees the one before up (as `switchyard up` does: the RM gives device ids in join
  // order, and tests expect slice 0 to have the first ones). 10 s in all.
  absl::Status StartSlices(int slices, int devices_per_worker,
                           const std::function<absl::Status(int slice)>& start_one);

  std::vector<std::unique_ptr<worker::WorkerServer>> workers_;
  std::vector<std::unique_ptr<FakeWorker>> fakes_;
  std::unique_ptr<proxy::Fleet> fleet_;
};

}  // namespace switchyard::test_support
