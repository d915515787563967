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
    const size_t count =
        batches ? std::min<size_t>(items.size() - start, limits::kAssembleBatchMax) : 1;
    DispatchRequest op;
    if (count == 1) {
      *op.mutable_assemble() = std::move(items[start].request);
    } else {
      for (size_t i = start; i < start + count; ++i) {
        *op.mutable_assemble_buffers()->add_buffers() = std::move(items[i].request);
      }
    }
    // The ids and devices, read before the requests move into the operation.
    std::vector<std::pair<uint64_t, int64_t>> made;
    auto header_of = [&](size_t i) -> const BufferHeader& {
      return count == 1 ? op.assemble().header()
                        : op.assemble_buffers().buffers(static_cast<int>(i - start)).header();
    };
    for (size_t i = start; i < start + count; ++i) {
      made.emplace_back(header_of(i).buffer_id(), header_of(i).device_id());
    }
    absl::StatusOr<WorkerConnection::Ticket> ticket =
        worker->Send(lane_, std::move(op), done, expected_epoch);
    for (size_t i = 0; i < count; ++i) {
      const auto [id, device] = made[i];
      items[start + i].array->shards[items[start + i].shard] =
          ticket.ok() ? std::make_shared<RemoteBuffer>(worker, id, device, *ticket)
                      : RemoteBuffer::Lost(worker, device, ticket.status());
    }
    start += count;
  }
}

}  // namespace switchyard::proxy
