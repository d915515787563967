#pragma once

// A session's arrays: client handle -> array (its shards on workers) or the error
// that the request creating it hit, so later uses report that error.
// Used from the session's request thread only.

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proxy/completion.h"
#include "proxy/sharding.h"
#include "proxy/worker_connection.h"
#include "switchyard/common.pb.h"

namespace switchyard::proxy {

// A buffer on a worker, made by operation `made` (or a put, whose ticket names only
// the epoch). Deleted on the worker when the last array using it lets go; lost, for
// good, once its worker's epoch has ended. `computed`, when known (launch outputs),
// settles once the worker has computed it.
class RemoteBuffer {
 public:
  RemoteBuffer(WorkerConnection* worker, uint64_t id, int64_t device, WorkerConnection::Ticket made,
               std::shared_ptr<Completion> computed = nullptr)
      : worker_(worker), id_(id), device_(device), made_(made), computed_(std::move(computed)) {}
  // A shard that was never made because of `lost` (a DATA_LOSS): operations on a lost
  // slice are accepted, and their results report the loss when used.
  static std::shared_ptr<RemoteBuffer> Lost(WorkerConnection* worker, int64_t device,
                                            absl::Status lost) {
    auto buffer = std::make_shared<RemoteBuffer>(worker, 0, device, WorkerConnection::Ticket{});
    buffer->lost_ = std::move(lost);
    return buffer;
  }
  ~RemoteBuffer() { worker_->DeleteLater(id_, made_); }
  RemoteBuffer(const RemoteBuffer&) = delete;
  RemoteBuffer& operator=(const RemoteBuffer&) = delete;

  WorkerConnection* worker() const { return worker_; }
  uint64_t id() const { return id_; }
  int64_t device() const { return device_; }
  const WorkerConnection::Ticket& made() const { return made_; }
  // Null when only the worker knows (ask it: WorkerConnection::AwaitThen).
  Completion* computed() const { return computed_.get(); }
  // OK, or the DATA_LOSS of the worker that held it.
  absl::Status Usable() const { return lost_.ok() ? worker_->CheckEpoch(made_.epoch) : lost_; }

 private:
  WorkerConnection* worker_;
  uint64_t id_;
  int64_t device_;
  WorkerConnection::Ticket made_;
  std::shared_ptr<Completion> computed_;
  absl::Status lost_;
};

struct Array {
  DType dtype = DTYPE_INVALID;
  std::vector<int64_t> shape;
  Sharding sharding;
  // Parallel to `sharding.devices`; null where a device holds no shard.
  std::vector<std::shared_ptr<RemoteBuffer>> shards;
  bool deleted = false;

  // OK when every shard is; otherwise the first lost shard's DATA_LOSS.
  absl::Status Usable() const;
};

class ArrayTable {
 public:
  // INVALID_ARGUMENT for handle 0 or one in use.
  absl::Status Add(uint64_t handle, std::shared_ptr<Array> array);
  // Records that creating `handle` failed; uses of it return `error`.
  void AddError(uint64_t handle, absl::Status error);
  // NOT_FOUND for an unknown handle; the stored error for a failed one;
  // FAILED_PRECONDITION for a deleted array.
  absl::StatusOr<std::shared_ptr<Array>> Get(uint64_t handle) const;
  // Like Get, but a deleted array is returned rather than an error.
  absl::StatusOr<std::shared_ptr<Array>> GetEvenIfDeleted(uint64_t handle) const;
  // Drops the handle; NOT_FOUND if unknown.
  absl::Status Remove(uint64_t handle);
  bool Contains(uint64_t handle) const { return arrays_.count(handle) > 0; }
  void Clear() { arrays_.clear(); }
  size_t size() const { return arrays_.size(); }

 private:
  std::map<uint64_t, absl::StatusOr<std::shared_ptr<Array>>> arrays_;
};

}  // namespace switchyard::proxy
