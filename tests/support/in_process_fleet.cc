#include "support/in_process_fleet.h"

#include <cstdio>
#include <cstdlib>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_server.h"
#include "common/status_macros.h"

namespace switchyard::test_support {

const char* TestPlugin() {
  const char* plugin = std::getenv("SWITCHYARD_TEST_PLUGIN");
  return plugin != nullptr && plugin[0] != '\0' ? plugin : nullptr;
}

namespace {

rm::RmOptions InProcessRmOptions() {
  rm::RmOptions rm_options = rm::DefaultRmOptions();
  rm_options.listen_host = kInProcessHost;
  // Short, so a lost worker is seen soon; not so short that a worker slowed by a
  // sanitizer on a loaded machine misses four in a row (100 ms did under TSan).
  rm_options.heartbeat_period = absl::Milliseconds(250);
  return rm_options;
}

}  // namespace

absl::Status InProcessFleet::StartSlices(int slices, int devices_per_worker,
                                         const std::function<absl::Status(int slice)>& start_one) {
  auto rm = rm::ResourceManagerServer::Start(InProcessRmOptions());
  if (!rm.ok()) return rm.status();
  rm_ = *std::move(rm);
  fleet_ = std::make_unique<proxy::Fleet>(rm_->address());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (int slice = 0; slice < slices; ++slice) {
    SY_RETURN_IF_ERROR(start_one(slice));
    const size_t devices = static_cast<size_t>((slice + 1) * devices_per_worker);
    while (true) {
      std::vector<proxy::DeviceEntry> entries = fleet_->Devices();
      bool up = entries.size() == devices;
      for (const proxy::DeviceEntry& device : entries) up = up && device.worker->up();
      if (up) break;
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError("the in-process fleet did not come up in 10 s");
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  return absl::OkStatus();
}

absl::Status InProcessFleet::Start(int slices, int devices_per_worker) {
  if (TestPlugin() == nullptr)
    return absl::FailedPreconditionError("SWITCHYARD_TEST_PLUGIN is not set");
  return StartSlices(slices, devices_per_worker, [&](int slice) -> absl::Status {
    worker::WorkerOptions options;
    options.listen_host = kInProcessHost;
    options.resource_manager_address = rm_->address();
    options.slice_index = slice;
    options.pjrt_plugin = TestPlugin();
    options.cpu_device_count = devices_per_worker;
    auto worker = worker::WorkerServer::Start(options);
    if (!worker.ok()) return worker.status();
    workers_.push_back(*std::move(worker));
    return absl::OkStatus();
  });
}

absl::Status InProcessFleet::StartFake(int slices, int devices_per_worker,
                                       uint32_t protocol_version) {
  return StartSlices(slices, devices_per_worker, [&](int slice) -> absl::Status {
    FakeWorker::Options options;
    options.rm_address = rm_->address();
    options.slice_index = slice;
    options.devices = devices_per_worker;
    options.protocol_version = protocol_version;
    auto worker = FakeWorker::Start(options);
    if (!worker.ok()) return worker.status();
    fakes_.push_back(*std::move(worker));
    return absl::OkStatus();
  });
}

void InProcessFleet::StopWorker(int slice) {
  if (!fakes_.empty()) {
    fakes_[slice]->Crash();
    return;
  }
  workers_[slice]->Shutdown();
  (void)workers_[slice]->Wait();
}

void InProcessFleet::StartOrAbort(int slices, int devices_per_worker) {
  absl::Status started = Start(slices, devices_per_worker);
  if (!started.ok()) {
    std::fprintf(stderr, "in-process fleet: %s\n", started.ToString().c_str());
    std::abort();
  }
}

bool InProcessFleet::WaitDown(int slice) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    bool down = true;
    for (const proxy::DeviceEntry& device : fleet_->Devices()) {
      if (device.info.slice_index() == slice && device.worker->up()) down = false;
    }
    if (down) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

InProcessFleet::~InProcessFleet() {
  fleet_.reset();
  workers_.clear();
  fakes_.clear();
  if (rm_ != nullptr) rm_->Shutdown();
}

}  // namespace switchyard::test_support
