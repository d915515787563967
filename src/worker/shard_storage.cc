#include "worker/shard_storage.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "common/host_bytes.h"
#include "common/status_join.h"
#include "common/status_macros.h"
#include "common/trace.h"
#include "common/wire_numbers.h"
#include "compile_cache/compile_cache.h"
#include "pjrt/buffer.h"
#include "pjrt/dtype.h"
#include "worker/zarr_array.h"

namespace switchyard::worker {
namespace {

std::vector<int64_t> Vector(const google::protobuf::RepeatedField<int64_t>& field) {
  return {field.begin(), field.end()};
}

absl::Time Deadline(int64_t timeout_ms) {
  return timeout_ms > 0 ? absl::Now() + absl::Milliseconds(timeout_ms) : absl::InfiniteFuture();
}

absl::Status Expired(const StoredShard& shard, int64_t timeout_ms) {
  return absl::DeadlineExceededError(
      absl::StrCat("the ", timeout_ms, " ms given to store '", shard.name(), "' ran out"));
}

// The error with the array it concerns.
absl::Status About(const StoredShard& shard, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("array '", shard.name(), "' in ",
                                                  shard.location(), ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::string> ShardStorage::Directory(const StoredShard& shard) const {
  const std::string& name = shard.name();
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("an array name must be one path component");
  }
  SY_ASSIGN_OR_RETURN(std::string location,
                      compile_cache::ResolveLocation(shard.location(), mount_root_));
  return absl::StrCat(location, "/", name);
}

void ShardStorage::Save(const SaveShardsRequest& request, std::function<void(absl::Status)> done) {
  if (request.shards().empty()) {
    done(absl::OkStatus());
    return;
  }
  const absl::Time deadline = Deadline(request.timeout_ms());
  auto join = JoinStatuses(request.shards_size(), std::move(done));
  for (const StoredShard& shard : request.shards()) {
    absl::StatusOr<std::shared_ptr<const StoredBuffer>> stored = buffers_->Get(shard.buffer_id());
    if (stored.ok() && !(*stored)->error.ok()) stored = (*stored)->error;
    if (!stored.ok()) {
      join(About(shard, stored.status()));
      continue;
    }
    const int64_t timeout_ms = request.timeout_ms();
    const uint64_t session = request.session();
    writers_.Run([this, shard, buffer = *std::move(stored), deadline, timeout_ms, session, join] {
      if (absl::Now() > deadline) {
        join(Expired(shard, timeout_ms));
        return;
      }
      absl::Status saved = About(shard, SaveOne(shard, *buffer, session));
      if (saved.ok() && absl::Now() > deadline) saved = Expired(shard, timeout_ms);
      join(saved);
    });
  }
}

absl::Status ShardStorage::SaveOne(const StoredShard& shard, const StoredBuffer& stored,
                                   uint64_t session) const {
  trace::Scoped span(absl::StrCat("save ", shard.name()), "storage", session);
  SY_ASSIGN_OR_RETURN(std::string dir, Directory(shard));
  ZarrArray array{shard.dtype(), Vector(shard.shape()), Vector(shard.chunks())};
  const pjrt::Buffer& buffer = *stored.buffer;
  if (static_cast<DType>(buffer.dtype()) != shard.dtype() ||
      buffer.dims() != Vector(shard.dims())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the shard on device ", stored.device_id, " is ", pjrt::DTypeName(buffer.dtype()), "[",
        absl::StrJoin(buffer.dims(), ","), "], not ", DType_Name(shard.dtype()), "[",
        absl::StrJoin(shard.dims(), ","), "]"));
  }
  // Waits until the buffer is computed; its error, if the launch making it failed.
  SY_ASSIGN_OR_RETURN(std::unique_ptr<HostBytes> bytes, buffer.ToHost());
  SY_RETURN_IF_ERROR(WriteChunk(dir, array, Vector(shard.start()), Vector(shard.dims()),
                                absl::string_view(bytes->data(), bytes->size())));
  if (shard.metadata()) SY_RETURN_IF_ERROR(WriteZarrMetadata(dir, array));
  return absl::OkStatus();
}

absl::Status ShardStorage::Load(const LoadShardsRequest& request, uint64_t owner) {
  const absl::Time deadline = Deadline(request.timeout_ms());
  // The shards are read side by side (each device's own), and all are in place (or
  // their errors are) before the stream's next operation.
  std::vector<absl::Status> loaded(request.shards_size());
  absl::BlockingCounter left(request.shards_size());
  for (int i = 0; i < request.shards_size(); ++i) {
    writers_.Run([&, i] {
      const StoredShard& shard = request.shards(i);
      loaded[i] = absl::Now() > deadline ? Expired(shard, request.timeout_ms())
                                         : About(shard, LoadOne(shard, owner, request.session()));
      left.DecrementCount();
    });
  }
  left.Wait();
  absl::Status failed;
  for (const absl::Status& status : loaded) {
    if (failed.ok()) failed = status;
  }
  if (!failed.ok()) {
    for (const StoredShard& shard : request.shards()) {
      if (!buffers_->Contains(shard.buffer_id()))
        buffers_->AddError(shard.buffer_id(), failed, owner);
    }
  }
  return failed;
}

absl::Status ShardStorage::LoadOne(const StoredShard& shard, uint64_t owner,
                                   uint64_t session) const {
  trace::Scoped span(absl::StrCat("load ", shard.name()), "storage", session);
  SY_ASSIGN_OR_RETURN(std::string dir, Directory(shard));
  SY_ASSIGN_OR_RETURN(int ordinal, devices_->OrdinalOf(shard.device_id()));
  const std::vector<int64_t> dims = Vector(shard.dims());
  SY_ASSIGN_OR_RETURN(const int64_t elements, CheckedElements(dims, "shard"));
  SY_RETURN_IF_ERROR(CheckedElements(Vector(shard.shape()), "array").status());
  const auto dtype = static_cast<pjrt::DType>(shard.dtype());
  SY_RETURN_IF_ERROR(ZarrDType(shard.dtype()).status());
  const int64_t bytes = pjrt::HostByteSize(dtype, elements);
  SY_ASSIGN_OR_RETURN(BufferStore::Reservation memory, buffers_->Reserve(bytes, [&] {
    return absl::StrCat("shard ", shard.name(), " (a load)");
  }));
  SY_ASSIGN_OR_RETURN(std::unique_ptr<HostBytes> data, HostBytes::Allocate(bytes));
  SY_RETURN_IF_ERROR(ReadBox(dir, shard.dtype(), Vector(shard.shape()), Vector(shard.start()), dims,
                             absl::MakeSpan(data->data(), data->size())));
  SY_ASSIGN_OR_RETURN(auto buffer,
                      client_->BufferFromOwnedHost(std::move(data), dtype, dims, ordinal));
  return buffers_->Add(shard.buffer_id(), shard.device_id(), std::move(buffer), owner);
}

}  // namespace switchyard::worker
