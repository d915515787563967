#pragma once

// The buffers one request makes on other devices (a pytree's arrays moved to another
// slice, resharded, copied), sent to each destination worker as few operations:
// batches of up to limits::kAssembleBatchMax (`AssembleBuffersRequest`, whose pulls the
// worker overlaps) to workers that take them (WORKER_PROTOCOL_ASSEMBLE_BATCHES), one
// `AssembleBufferRequest` each to older ones or for a lone buffer. Not thread-safe: one
// request's, on its session's thread.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "proxy/array_table.h"
#include "proxy/worker_connection.h"
#include "switchyard/worker.pb.h"

namespace switchyard::proxy {

class TransferBatch {
 public:
  // `lane`: the session's operation lane; `what` names the transfers in failure logs.
  TransferBatch(uint64_t lane, absl::string_view what) : lane_(lane), what_(what) {}
  // Send(): a request that fails between Add and Send leaves no shard unset.
  ~TransferBatch() { Send(); }
  TransferBatch(const TransferBatch&) = delete;
  TransferBatch& operator=(const TransferBatch&) = delete;

  // `request` makes shard `shard` of `array` on `worker` from `sources`, which stay
  // alive until it is made; the shard is set at Send() (to a lost one if it could not be
  // sent). `expected_epoch` as in WorkerConnection::Send.
  void Add(WorkerConnection* worker, uint64_t expected_epoch, AssembleBufferRequest request,
           std::vector<std::shared_ptr<RemoteBuffer>> sources, std::shared_ptr<Array> array,
           size_t shard);
  // Sends what was added, in the order added for each worker, and fills the slots.
  void Send();

 private:
  struct Item {
    AssembleBufferRequest request;
    std::shared_ptr<Array> array;  // held, so that a failed request leaves nothing dangling
    size_t shard;
  };
  struct Group {
    std::vector<Item> items;
    std::vector<std::shared_ptr<RemoteBuffer>> sources;
  };
  void SendGroup(WorkerConnection* worker, uint64_t expected_epoch, Group group);

  const uint64_t lane_;
  const std::string what_;
  std::map<std::pair<WorkerConnection*, uint64_t>, Group> groups_;
};

}  // namespace switchyard::proxy
