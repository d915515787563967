#include "proxy/transfer_batch.h"

#include <algorithm>

#include "common/limits.h"
#include "common/logging.h"

namespace switchyard::proxy {

void TransferBatch::Add(WorkerConnection* worker, uint64_t expected_epoch,
                        AssembleBufferRequest request,
                        std::vector<std::shared_ptr<RemoteBuffer>> sources,
                        std::shared_ptr<Array> array, size_t shard) {
  Group& group = groups_[{worker, expected_epoch}];
  group.items.push_back({std::move(request), std::move(array), shard});
  for (auto& source : sources) group.sources.push_back(std::move(source));
}

void TransferBatch::Send() {
  auto groups = std::move(groups_);
  groups_.clear();
  for (auto& [key, group] : groups) SendGroup(key.first, key.second, std::move(group));
}

void TransferBatch::SendGroup(WorkerConnection* worker, uint64_t expected_epoch, Group group) {
  // The sources stay alive (not deleted on their workers) until every pull is done.
  auto sources =
      std::make_shared<std::vector<std::shared_ptr<RemoteBuffer>>>(std::move(group.sources));
  auto done = [worker, sources, what = what_](absl::Status status) {
    if (!status.ok() && !absl::IsDataLoss(status)) {  // a lost worker's loss is logged once
      SY_LOG(Warning) << what << " " << worker->address() << " failed: " << status;
    }
  };
  const bool batches = worker->TakesAssembleBatches();
  std::vector<Item>& items = group.items;
  for (size_t start = 0; start < items.size();) {
    const size_t end =
        batches ? std::min<size_t>(items.size(), start + limits::kAssembleBatchMax) : start + 1;
    // Each shard's id and device, read before its request moves into the operation.
    std::vector<BufferHeader> made;
    DispatchRequest op;
    for (size_t i = start; i < end; ++i) {
      made.push_back(items[i].request.header());
      if (end - start == 1) {
        *op.mutable_assemble() = std::move(items[i].request);
      } else {
        *op.mutable_assemble_buffers()->add_buffers() = std::move(items[i].request);
      }
    }
    absl::StatusOr<WorkerConnection::Ticket> ticket =
        worker->Send(lane_, std::move(op), done, expected_epoch);
    for (size_t i = start; i < end; ++i) {
      const BufferHeader& header = made[i - start];
      items[i].array->shards[items[i].shard] =
          ticket.ok() ? std::make_shared<RemoteBuffer>(worker, header.buffer_id(),
                                                       header.device_id(), *ticket)
                      : RemoteBuffer::Lost(worker, header.device_id(), ticket.status());
    }
    start = end;
  }
}

}  // namespace switchyard::proxy
