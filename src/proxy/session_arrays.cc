// Session handlers for arrays: creation from host buffers, assembly and
// disassembly, copies, fetches, readiness and deletion.

#include <cstring>
#include <set>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/element_type.h"
#include "common/guarded.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/status_join.h"
#include "common/status_macros.h"
#include "common/trace.h"
#include "common/wire_numbers.h"
#include "proxy/ifrt_convert.h"
#include "proxy/session.h"
#include "proxy/worker_calls.h"

namespace switchyard::proxy {
namespace {

// How long a request that consumes a client upload waits for the bytes.
constexpr absl::Duration kHostBufferWait = absl::Minutes(10);

// The client upload a request consumes, once it has begun to arrive: the client starts
// an upload before it sends the request naming it, so one that has not begun within
// kHostBufferArrivalMs never will, and the session must go on to its next request.
absl::StatusOr<std::shared_ptr<const HostBuffer>> ArrivedUpload(HostBufferStore& store,
                                                                uint64_t handle,
                                                                const CancelledFn& cancelled) {
  const absl::Duration bound = absl::Milliseconds(limits::kHostBufferArrivalMs);
  absl::StatusOr<std::shared_ptr<const HostBuffer>> host = store.Lookup(handle, bound, cancelled);
  if (absl::IsNotFound(host.status())) {
    return absl::NotFoundError(
        absl::StrCat("host buffer ", handle, " was never stored: no upload of it began within ",
                     absl::FormatDuration(bound), " of the request naming it"));
  }
  return host;
}

std::vector<int64_t> Strides(bool has, const wire::ByteStrides& strides) {
  if (!has) return {};
  return {strides.strides().begin(), strides.strides().end()};
}

// A shard for a worker that is down: it never existed, and every use of it reports the
// loss.
std::shared_ptr<RemoteBuffer> LostShard(WorkerConnection* worker, int64_t device) {
  return RemoteBuffer::Lost(worker, device, worker->CheckEpoch(0));
}

// A piece of `source` for a transfer: where it is and the operation that makes it.
void SetSource(const RemoteBuffer& source, WorkerConnection* destination, BufferPiece* piece) {
  piece->set_source_address(source.worker() == destination ? "" : source.worker()->address());
  piece->set_source_buffer_id(source.id());
  piece->set_source_stream(source.made().stream);
  piece->set_source_seq(source.made().seq);
  piece->set_source_boot(source.worker()->boot_id());
}

}  // namespace

absl::StatusOr<std::shared_ptr<RemoteBuffer>> Session::PutShard(
    int64_t device, DType dtype, const std::vector<int64_t>& shape, const std::string& memory_kind,
    const HostBuffer* arriving, absl::string_view bytes, const PutPlane& plane) {
  SY_ASSIGN_OR_RETURN(WorkerConnection * worker, WorkerOf(device));
  // Accepted, as a put to a live slice would be; reading the array says what was lost
  // (the client may not wait for this answer, but it does wait for reads).
  if (!worker->up()) return LostShard(worker, device);
  const uint64_t id = NewWorkerObjectId();
  absl::StatusOr<uint64_t> epoch;
  if (arriving == nullptr) {
    epoch = PutBuffer(worker, id, device, dtype, shape, bytes, memory_kind, plane);
  } else {
    const BytePrefix prefix = [&](int64_t n) {
      const absl::Time deadline = absl::Now() + kHostBufferWait;
      return plane.streamed != nullptr ? arriving->StreamFor(n, deadline, cancelled_)
                                       : arriving->WaitFor(n, deadline, cancelled_);
    };
    epoch =
        PutBuffer(worker, id, device, dtype, shape, arriving->size(), memory_kind, prefix, plane);
  }
  SY_RETURN_IF_ERROR(epoch.status());
  return std::make_shared<RemoteBuffer>(worker, id, device,
                                        WorkerConnection::Ticket{*epoch, 0, 0, id_});
}

absl::StatusOr<std::shared_ptr<Array>> Session::PutHostArray(
    DType dtype, std::vector<int64_t> shape, Sharding sharding,
    std::shared_ptr<const HostBuffer> host_buffer, const std::vector<int64_t>& byte_strides) {
  const HostBuffer& host = *host_buffer;
  for (int64_t device : sharding.devices) SY_RETURN_IF_ERROR(SessionDevice(device).status());
  SY_ASSIGN_OR_RETURN(ShardLayout layout, LayoutShards(sharding, shape));
  auto array = std::make_shared<Array>();
  array->dtype = dtype;
  array->shape = shape;
  array->shards.resize(sharding.devices.size());
  if (dtype == STRING) {
    // Host-side strings (StringArrayContents), whole on each device: colocated Python
    // takes and makes them.
    SY_ASSIGN_OR_RETURN(absl::string_view all,
                        host.WaitAll(absl::Now() + kHostBufferWait, cancelled_));
    for (size_t i = 0; i < sharding.devices.size(); ++i) {
      if (!layout.holds[i]) continue;
      if (layout.domains[i].shape() != shape) {
        return absl::UnimplementedError(
            "a string array is held whole on each of its devices (single-device or "
            "replicated); split ones are not supported");
      }
      SY_ASSIGN_OR_RETURN(array->shards[i],
                          PutShard(sharding.devices[i], dtype, shape, "", nullptr, all, {}));
    }
    array->sharding = std::move(sharding);
    return array;
  }
  const int64_t element_bytes = HostElementBytes(dtype);
  if (element_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("arrays of dtype ", DType_Name(dtype), " cannot be made from host data"));
  }
  // An array each of its devices holds whole (one device's, or replicated) streams the
  // upload on as it arrives to the first, and the proxy holds only a window of it
  // (HostBuffer::SetWindow); the others copy it from there, worker to worker. A split
  // array reads it all at once.
  std::vector<int64_t> holders;
  bool all_whole = byte_strides.empty();
  for (size_t i = 0; i < sharding.devices.size(); ++i) {
    if (!layout.holds[i]) continue;
    holders.push_back(static_cast<int64_t>(i));
    all_whole = all_whole && layout.domains[i].shape() == shape;
  }
  if (all_whole && host.size() != NumElements(shape) * element_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("host buffer has ", host.size(),
                                                   " bytes; the array needs ",
                                                   NumElements(shape) * element_bytes));
  }
  if (all_whole && host.TakeReader()) {
    TransferBatch copies(id_, "replicate on");
    SY_RETURN_IF_ERROR(PutStreamed(host, UploadPlane(host_buffer, &host), dtype, shape, sharding,
                                   holders, array, copies));
    copies.Send();
    array->sharding = std::move(sharding);
    return array;
  }
  const std::string memory_kind = sharding.memory_kind.value_or("");
  for (int64_t i : holders) {
    const int64_t device = sharding.devices[i];
    if (all_whole) {  // a reader other than this request took the upload: read as it arrives
      SY_ASSIGN_OR_RETURN(array->shards[i], PutShard(device, dtype, shape, memory_kind, &host, {},
                                                     UploadPlane(host_buffer)));
      continue;
    }
    SY_ASSIGN_OR_RETURN(absl::string_view all,
                        host.WaitAll(absl::Now() + kHostBufferWait, cancelled_));
    SY_ASSIGN_OR_RETURN(std::string cut,
                        ExtractShard(all, shape, byte_strides, element_bytes, layout.domains[i]));
    auto shard = std::make_shared<const std::string>(std::move(cut));
    SY_ASSIGN_OR_RETURN(array->shards[i],
                        PutShard(device, dtype, layout.domains[i].shape(), memory_kind, nullptr,
                                 *shard, UploadPlane(shard)));
  }
  array->sharding = std::move(sharding);
  return array;
}

absl::StatusOr<std::unique_ptr<HostBytes>> Session::FetchArray(
    const Array& array, const std::vector<int64_t>& byte_strides, CallSet* calls) {
  SY_ASSIGN_OR_RETURN(ShardLayout layout, LayoutShards(array.sharding, array.shape));
  if (array.dtype == STRING) {
    // A whole copy, as the worker sends it (StringArrayContents): the host form.
    absl::Status last =
        absl::UnimplementedError("fetching a string array split over devices is not supported");
    for (size_t i = 0; i < array.shards.size(); ++i) {
      if (!layout.holds[i] || array.shards[i] == nullptr) continue;
      if (layout.domains[i].shape() != array.shape) continue;
      const RemoteBuffer& shard = *array.shards[i];
      last = shard.Usable();
      if (!last.ok()) continue;
      return GetBuffer(shard.worker(), shard.id(), shard.made(), calls);
    }
    return last;
  }
  const int64_t element_bytes = HostElementBytes(array.dtype);
  SY_ASSIGN_OR_RETURN(int64_t region, HostRegionBytes(array.shape, byte_strides, element_bytes));
  std::unique_ptr<HostBytes> host;
  std::vector<IndexDomain> done;  // replicated shards are fetched once
  for (size_t i = 0; i < array.shards.size(); ++i) {
    if (!layout.holds[i] || array.shards[i] == nullptr) continue;
    if (std::find(done.begin(), done.end(), layout.domains[i]) != done.end()) continue;
    // Of the copies of this part, one that is not lost: a replicated array survives
    // the loss of a slice.
    size_t pick = i;
    for (size_t k = i; k < array.shards.size(); ++k) {
      if (layout.holds[k] && array.shards[k] != nullptr && layout.domains[k] == layout.domains[i] &&
          array.shards[k]->Usable().ok()) {
        pick = k;
        break;
      }
    }
    const RemoteBuffer& shard = *array.shards[pick];
    SY_RETURN_IF_ERROR(shard.Usable());
    SY_ASSIGN_OR_RETURN(std::unique_ptr<HostBytes> data,
                        GetBuffer(shard.worker(), shard.id(), shard.made(), calls));
    if (byte_strides.empty() && layout.domains[i].shape() == array.shape &&
        static_cast<int64_t>(data->size()) == region) {
      return data;  // one shard holds it all, already dense
    }
    if (host == nullptr) {
      SY_ASSIGN_OR_RETURN(host, HostBytes::Allocate(region));
      std::memset(host->data(), 0, region);  // gaps between strided rows stay zero
    }
    SY_RETURN_IF_ERROR(InsertShard(absl::string_view(data->data(), data->size()), array.shape,
                                   byte_strides, element_bytes, layout.domains[i],
                                   absl::MakeSpan(host->data(), region)));
    done.push_back(layout.domains[i]);
  }
  if (host == nullptr) {
    SY_ASSIGN_OR_RETURN(host, HostBytes::Allocate(region));
    std::memset(host->data(), 0, region);
  }
  return host;
}

std::string Session::MemoryKind(const Sharding& sharding, int64_t device) const {
  if (sharding.memory_kind.has_value() && !sharding.memory_kind->empty())
    return *sharding.memory_kind;
  auto it = devices_.find(device);
  return it == devices_.end() ? "" : it->second.info.default_memory_kind();
}

absl::Status Session::CopyShard(const Array& array, size_t index, int64_t to_device,
                                const std::string& memory_kind, const std::shared_ptr<Array>& copy,
                                TransferBatch& batch) {
  std::shared_ptr<RemoteBuffer> from = array.shards[index];
  if (from->device() == to_device && MemoryKind(array.sharding, from->device()) == memory_kind) {
    copy->shards[index] = from;
    return absl::OkStatus();
  }
  SY_ASSIGN_OR_RETURN(ShardLayout layout, LayoutShards(array.sharding, array.shape));
  return CopyBuffer(from, array.dtype, layout.domains[index].shape(), to_device, memory_kind, copy,
                    index, batch);
}

absl::Status Session::CopyBuffer(const std::shared_ptr<RemoteBuffer>& from, DType dtype,
                                 const std::vector<int64_t>& dims, int64_t to_device,
                                 const std::string& memory_kind, const std::shared_ptr<Array>& copy,
                                 size_t index, TransferBatch& batch) {
  SY_ASSIGN_OR_RETURN(WorkerConnection * worker, WorkerOf(to_device));
  // A copy of a lost shard, or to a lost slice, is accepted; using it reports the loss.
  if (absl::Status usable = from->Usable(); !usable.ok()) {
    copy->shards[index] = RemoteBuffer::Lost(worker, to_device, usable);
    return absl::OkStatus();
  }
  AssembleBufferRequest request;
  BufferHeader* header = request.mutable_header();
  header->set_buffer_id(NewWorkerObjectId());
  header->set_device_id(to_device);
  header->set_dtype(dtype);
  header->mutable_dims()->Add(dims.begin(), dims.end());
  header->set_size_bytes(NumElements(dims) * HostElementBytes(dtype));
  header->set_memory_kind(memory_kind);
  SetSource(*from, worker, request.add_pieces());
  // The destination pulls straight from the source worker; `from` stays alive (not
  // deleted on its worker) until the pull is done. A local source must still be there:
  // the copy goes out in the epoch it was made in.
  const uint64_t epoch = from->worker() == worker ? from->made().epoch : 0;
  batch.Add(worker, epoch, std::move(request), {from}, copy, index);
  return absl::OkStatus();
}

absl::Status Session::PutStreamed(const HostBuffer& host, const PutPlane& plane, DType dtype,
                                  const std::vector<int64_t>& shape, const Sharding& sharding,
                                  absl::Span<const int64_t> indices,
                                  const std::shared_ptr<Array>& array, TransferBatch& batch) {
  const std::string memory_kind = sharding.memory_kind.value_or("");
  std::shared_ptr<RemoteBuffer> source;  // the first shard put that is usable
  for (int64_t index : indices) {
    const int64_t device = sharding.devices[index];
    if (source != nullptr) {
      SY_RETURN_IF_ERROR(CopyBuffer(source, dtype, shape, device, MemoryKind(sharding, device),
                                    array, index, batch));
      continue;
    }
    SY_ASSIGN_OR_RETURN(array->shards[index],
                        PutShard(device, dtype, shape, memory_kind, &host, {}, plane));
    if (array->shards[index]->Usable().ok()) source = array->shards[index];
  }
  return absl::OkStatus();
}

absl::Status Session::HandleMakeArrayFromHostBuffer(
    const wire::MakeArrayFromHostBufferRequest& request,
    wire::MakeArrayFromHostBufferResponse* response) {
  const uint64_t handle =
      request.has_array_handle() ? request.array_handle() : request.host_buffer_handle();
  // A request that fails before it reads its upload lets go of it, as the shards request
  // does; a malformed one fails at once, not after waiting for the upload.
  absl::Cleanup unread = [&] { (void)host_buffers_->Delete(request.host_buffer_handle()); };
  SY_ASSIGN_OR_RETURN(DType dtype, FromDTypeProto(request.dtype()));
  SY_ASSIGN_OR_RETURN(Sharding sharding, ParseSharding(request.sharding()));
  SY_ASSIGN_OR_RETURN(std::vector<int64_t> shape, FromShapeProto(request.shape()));
  SY_ASSIGN_OR_RETURN(auto host,
                      ArrivedUpload(*host_buffers_, request.host_buffer_handle(), cancelled_));
  (void)host_buffers_->Claim(request.host_buffer_handle());
  std::move(unread).Cancel();
  // Whatever comes of the request, nothing reads the upload after it.
  absl::Cleanup consumed = [&host] { host->Consumed(); };
  std::vector<int64_t> strides = DropDenseStrides(
      Strides(request.has_byte_strides(), request.byte_strides()), shape, HostElementBytes(dtype));
  SY_ASSIGN_OR_RETURN(auto array,
                      PutHostArray(dtype, std::move(shape), std::move(sharding), host, strides));
  SY_RETURN_IF_ERROR(arrays_.Add(handle, std::move(array)));
  response->set_array_handle(handle);
  return absl::OkStatus();
}

absl::Status Session::HandleMakeErrorArrays(const wire::MakeErrorArraysRequest& request,
                                            wire::MakeErrorArraysResponse* response) {
  absl::Status error = FromStatusProto(request.error());
  if (error.ok()) return absl::InvalidArgumentError("MakeErrorArrays needs an error");
  if (request.array_handles_size() != request.array_specs_size()) {
    return absl::InvalidArgumentError("one array handle per spec is required");
  }
  // Arrays of shards that were never made: every use reports `error`.
  std::vector<std::shared_ptr<Array>> made;
  for (const auto& spec : request.array_specs()) {
    auto array = std::make_shared<Array>();
    SY_ASSIGN_OR_RETURN(array->dtype, FromDTypeProto(spec.dtype()));
    SY_ASSIGN_OR_RETURN(array->shape, FromShapeProto(spec.shape()));
    SY_ASSIGN_OR_RETURN(array->sharding, ParseSharding(spec.sharding()));
    for (int64_t device : array->sharding.devices) {
      SY_ASSIGN_OR_RETURN(WorkerConnection * worker, WorkerOf(device));
      array->shards.push_back(RemoteBuffer::Lost(worker, device, error));
    }
    made.push_back(std::move(array));
  }
  for (size_t i = 0; i < made.size(); ++i) {
    SY_RETURN_IF_ERROR(arrays_.Add(request.array_handles(static_cast<int>(i)), std::move(made[i])));
    response->add_array_handles(request.array_handles(static_cast<int>(i)));
  }
  return absl::OkStatus();
}

absl::Status Session::HandleMakeArraysFromHostBufferShards(
    const wire::MakeArraysFromHostBufferShardsRequest& request,
    wire::MakeArraysFromHostBufferShardsResponse* response) {
  // A request that fails lets go of the uploads it names that it did not read yet: their
  // writers, held to a window, would otherwise wait for a reader that never comes.
  absl::Cleanup unread = [&] {
    for (const auto& spec : request.specs()) {
      for (const auto& buffer : spec.host_buffers()) {
        (void)host_buffers_->Delete(buffer.host_buffer_handle());
      }
    }
  };
  if (request.array_handles_size() != request.specs_size()) {
    return absl::InvalidArgumentError("one array handle per spec is required");
  }
  TransferBatch copies(id_, "replicate on");  // sent at the end, every array's at once
  for (int s = 0; s < request.specs_size(); ++s) {
    const auto& spec = request.specs(s);
    if (spec.addressable_shard_indices_size() != spec.host_buffers_size()) {
      return absl::InvalidArgumentError("shard indices and host buffers must pair up");
    }
    SY_ASSIGN_OR_RETURN(DType dtype, FromDTypeProto(spec.array_spec().dtype()));
    SY_ASSIGN_OR_RETURN(Sharding sharding, ParseSharding(spec.array_spec().sharding()));
    for (int64_t device : sharding.devices) SY_RETURN_IF_ERROR(SessionDevice(device).status());
    auto array = std::make_shared<Array>();
    array->dtype = dtype;
    SY_ASSIGN_OR_RETURN(array->shape, FromShapeProto(spec.array_spec().shape()));
    array->shards.resize(sharding.devices.size());
    for (int b = 0; b < spec.host_buffers_size(); ++b) {
      const auto& buffer = spec.host_buffers(b);
      SY_ASSIGN_OR_RETURN(auto host,
                          ArrivedUpload(*host_buffers_, buffer.host_buffer_handle(), cancelled_));
      (void)host_buffers_->Claim(buffer.host_buffer_handle());
      absl::Cleanup consumed = [&host] { host->Consumed(); };
      SY_ASSIGN_OR_RETURN(const std::vector<int64_t> shard_shape, FromShapeProto(buffer.shape()));
      const auto& indices = spec.addressable_shard_indices(b).indices();
      for (int64_t index : indices) {
        if (index < 0 || index >= static_cast<int64_t>(sharding.devices.size())) {
          return absl::InvalidArgumentError(absl::StrCat("shard index ", index, " out of range"));
        }
      }
      const std::vector<int64_t> strides =
          DropDenseStrides(Strides(buffer.has_byte_strides(), buffer.byte_strides()), shard_shape,
                           HostElementBytes(dtype));
      // A buffer of the wrong size is refused before any of it is read (or staged whole).
      SY_ASSIGN_OR_RETURN(const int64_t region,
                          HostRegionBytes(shard_shape, strides, HostElementBytes(dtype)));
      if (host->size() != region) {
        return absl::InvalidArgumentError(absl::StrCat(
            "host buffer ", buffer.host_buffer_handle(), " has ", host->size(), " bytes; shard ", b,
            " of array ", request.array_handles(s), " needs ", region));
      }
      // A dense shard streams on as it arrives to its first device, and the proxy holds
      // only a window of it (HostBuffer::SetWindow); further devices (replicated) copy it
      // from there, worker to worker. A strided one is read whole and gathered first.
      // (Its one reader: a lookup of the same handle must not let go of bytes it needs.)
      if (strides.empty() && host->TakeReader()) {
        SY_RETURN_IF_ERROR(PutStreamed(*host, UploadPlane(host, host.get()), dtype, shard_shape,
                                       sharding, indices, array, copies));
        continue;
      }
      SY_ASSIGN_OR_RETURN(absl::string_view data,
                          host->WaitAll(absl::Now() + kHostBufferWait, cancelled_));
      PutPlane plane = UploadPlane(host);
      if (!strides.empty()) {
        IndexDomain whole{std::vector<int64_t>(shard_shape.size(), 0), shard_shape};
        SY_ASSIGN_OR_RETURN(std::string cut, ExtractShard(data, shard_shape, strides,
                                                          HostElementBytes(dtype), whole));
        auto gathered = std::make_shared<const std::string>(std::move(cut));
        data = *gathered;
        plane.owner = gathered;
      }
      const std::string memory_kind = sharding.memory_kind.value_or("");
      for (int64_t index : indices) {
        SY_ASSIGN_OR_RETURN(array->shards[index],
                            PutShard(sharding.devices[index], dtype, shard_shape, memory_kind,
                                     nullptr, data, plane));
      }
    }
    array->sharding = std::move(sharding);
    SY_RETURN_IF_ERROR(arrays_.Add(request.array_handles(s), std::move(array)));
    response->add_array_handles(request.array_handles(s));
  }
  std::move(unread).Cancel();
  return absl::OkStatus();
}

absl::Status Session::HandleAssemble(
    const wire::AssembleArrayFromSingleDeviceArraysRequest& request,
    wire::AssembleArrayFromSingleDeviceArraysResponse* response) {
  SY_ASSIGN_OR_RETURN(Sharding sharding, ParseSharding(request.sharding()));
  if (static_cast<size_t>(request.single_device_array_handles_size()) != sharding.devices.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the sharding has ", sharding.devices.size(), " devices but ",
        request.single_device_array_handles_size(), " single-device arrays were given"));
  }
  auto array = std::make_shared<Array>();
  SY_ASSIGN_OR_RETURN(array->shape, FromShapeProto(request.shape()));
  array->shards.resize(sharding.devices.size());
  for (size_t i = 0; i < sharding.devices.size(); ++i) {
    SY_ASSIGN_OR_RETURN(auto part, arrays_.Get(request.single_device_array_handles(i)));
    if (part->shards.size() != 1 || part->shards[0] == nullptr) {
      return absl::InvalidArgumentError(
          "AssembleArrayFromSingleDeviceArrays needs single-device arrays");
    }
    if (part->shards[0]->device() != sharding.devices[i]) {
      return absl::InvalidArgumentError(absl::StrCat("shard ", i, " lives on device ",
                                                     part->shards[0]->device(),
                                                     ", the sharding says ", sharding.devices[i]));
    }
    array->dtype = part->dtype;
    array->shards[i] = part->shards[0];
    if (request.copy_semantics() == wire::ARRAY_COPY_SEMANTICS_DONATE_INPUT) part->deleted = true;
  }
  if (request.has_dtype()) {
    SY_ASSIGN_OR_RETURN(array->dtype, FromDTypeProto(request.dtype()));
  }
  array->sharding = std::move(sharding);
  SY_RETURN_IF_ERROR(arrays_.Add(request.result_handle(), std::move(array)));
  response->set_array_handle(request.result_handle());
  return absl::OkStatus();
}

absl::Status Session::HandleDisassemble(
    const wire::DisassembleIntoSingleDeviceArraysRequest& request,
    wire::DisassembleIntoSingleDeviceArraysResponse* response) {
  SY_ASSIGN_OR_RETURN(auto array, arrays_.Get(request.array_handle()));
  SY_ASSIGN_OR_RETURN(ShardLayout layout, LayoutShards(array->sharding, array->shape));
  if (static_cast<size_t>(request.result_handles_size()) != array->shards.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the array has ", array->shards.size(),
                                                   " shards; ", request.result_handles_size(),
                                                   " result handles were given"));
  }
  for (size_t i = 0; i < array->shards.size(); ++i) {
    if (array->shards[i] == nullptr) {
      return absl::UnimplementedError("disassembling an array with devices that hold no shard");
    }
    auto part = std::make_shared<Array>();
    part->dtype = array->dtype;
    part->shape = layout.domains[i].shape();
    part->sharding = SingleDevice(array->sharding.devices[i], array->sharding.memory_kind);
    part->shards = {array->shards[i]};
    SY_RETURN_IF_ERROR(arrays_.Add(request.result_handles(i), std::move(part)));
    response->add_array_handles(request.result_handles(i));
  }
  if (request.copy_semantics() == wire::ARRAY_COPY_SEMANTICS_DONATE_INPUT) array->deleted = true;
  return absl::OkStatus();
}

absl::Status Session::HandleFullyReplicatedShard(const wire::FullyReplicatedShardRequest& request,
                                                 wire::FullyReplicatedShardResponse* response) {
  SY_ASSIGN_OR_RETURN(auto array, arrays_.Get(request.array_handle()));
  if (!array->sharding.IsFullyReplicated() || array->shards.empty() ||
      array->shards[0] == nullptr) {
    return absl::InvalidArgumentError(
        "FullyReplicatedShard of an array that is not fully replicated");
  }
  auto part = std::make_shared<Array>();
  part->dtype = array->dtype;
  part->shape = array->shape;
  part->sharding = SingleDevice(array->sharding.devices[0], array->sharding.memory_kind);
  part->shards = {array->shards[0]};
  SY_RETURN_IF_ERROR(arrays_.Add(request.result_handle(), std::move(part)));
  response->set_array_handle(request.result_handle());
  return absl::OkStatus();
}

absl::Status Session::HandleCopyArrays(const wire::CopyArraysRequest& request,
                                       wire::CopyArraysResponse* response) {
  if (request.result_handles_size() != request.array_handles_size()) {
    return absl::InvalidArgumentError("one result handle per array is required");
  }
  TransferBatch batch(id_, "transfer to");  // sent at the end, every array's at once
  for (int a = 0; a < request.array_handles_size(); ++a) {
    SY_ASSIGN_OR_RETURN(auto array, arrays_.Get(request.array_handles(a)));
    std::vector<int64_t> devices(request.device_ids().begin(), request.device_ids().end());
    if (devices.empty()) devices = array->sharding.devices;
    if (devices.size() != array->sharding.devices.size()) {
      return absl::InvalidArgumentError(absl::StrCat("CopyArrays to ", devices.size(),
                                                     " devices of an array on ",
                                                     array->sharding.devices.size()));
    }
    auto copy = std::make_shared<Array>();
    copy->dtype = array->dtype;
    copy->shape = array->shape;
    copy->sharding = WithDevices(array->sharding, devices);
    if (request.has_memory_kind()) {
      // Present but empty: the default memory.
      copy->sharding.memory_kind = request.memory_kind().empty()
                                       ? std::nullopt
                                       : std::optional<std::string>(request.memory_kind());
    }
    copy->shards.resize(devices.size());
    for (size_t i = 0; i < devices.size(); ++i) {
      SY_RETURN_IF_ERROR(SessionDevice(devices[i]).status());
      if (array->shards[i] == nullptr) continue;
      SY_RETURN_IF_ERROR(
          CopyShard(*array, i, devices[i], MemoryKind(copy->sharding, devices[i]), copy, batch));
    }
    if (request.copy_semantics() == wire::ARRAY_COPY_SEMANTICS_DONATE_INPUT) array->deleted = true;
    SY_RETURN_IF_ERROR(arrays_.Add(request.result_handles(a), std::move(copy)));
    response->add_array_handles(request.result_handles(a));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Array>> Session::Reshard(const Array& array,
                                                        const ::xla::ifrt::ArraySpecProto& spec,
                                                        bool reuse, TransferBatch& batch) {
  SY_ASSIGN_OR_RETURN(DType dtype, FromDTypeProto(spec.dtype()));
  SY_ASSIGN_OR_RETURN(const std::vector<int64_t> shape, FromShapeProto(spec.shape()));
  if (dtype != array.dtype || shape != array.shape) {
    return absl::InvalidArgumentError(
        "ReshardArrays changes only the sharding, not dtype or shape");
  }
  SY_ASSIGN_OR_RETURN(Sharding sharding, ParseSharding(spec.sharding()));
  for (int64_t device : sharding.devices) SY_RETURN_IF_ERROR(SessionDevice(device).status());
  SY_ASSIGN_OR_RETURN(ShardLayout to, LayoutShards(sharding, shape));
  SY_ASSIGN_OR_RETURN(ShardLayout from, LayoutShards(array.sharding, shape));
  auto out = std::make_shared<Array>();
  out->dtype = dtype;
  out->shape = shape;
  out->shards.resize(sharding.devices.size());
  for (size_t j = 0; j < sharding.devices.size(); ++j) {
    if (!to.holds[j]) continue;
    const int64_t device = sharding.devices[j];
    SY_ASSIGN_OR_RETURN(WorkerConnection * worker, WorkerOf(device));
    const IndexDomain& want = to.domains[j];
    // The source shards by distinct domain, preferring a copy on this device, then
    // on this worker: each box of the result is taken once.
    std::vector<size_t> chosen;
    for (size_t i = 0; i < array.shards.size(); ++i) {
      if (!from.holds[i] || array.shards[i] == nullptr) continue;
      auto same = std::find_if(chosen.begin(), chosen.end(),
                               [&](size_t c) { return from.domains[c] == from.domains[i]; });
      auto rank = [&](size_t k) {
        if (!array.shards[k]->Usable().ok()) return 3;  // lost: only if nothing else has it
        return array.shards[k]->device() == device   ? 0
               : array.shards[k]->worker() == worker ? 1
                                                     : 2;
      };
      if (same == chosen.end()) {
        chosen.push_back(i);
      } else if (rank(i) < rank(*same)) {
        *same = i;
      }
    }
    // The shard already there, whole: nothing to move.
    const std::string memory_kind = MemoryKind(sharding, device);
    auto in_place = std::find_if(chosen.begin(), chosen.end(), [&](size_t c) {
      return from.domains[c] == want && array.shards[c]->device() == device &&
             MemoryKind(array.sharding, device) == memory_kind;
    });
    if (reuse && in_place != chosen.end()) {
      out->shards[j] = array.shards[*in_place];
      continue;
    }
    AssembleBufferRequest request;
    BufferHeader* header = request.mutable_header();
    header->set_buffer_id(NewWorkerObjectId());
    header->set_device_id(device);
    header->set_dtype(dtype);
    const std::vector<int64_t> dims = want.shape();
    header->mutable_dims()->Add(dims.begin(), dims.end());
    header->set_size_bytes(NumElements(dims) * HostElementBytes(dtype));
    header->set_memory_kind(memory_kind);
    std::vector<std::shared_ptr<RemoteBuffer>> sources;
    int64_t covered = 0;
    absl::Status lost;
    uint64_t local_epoch = 0;  // of sources on the destination worker, if any
    for (size_t c : chosen) {
      const IndexDomain& have = from.domains[c];
      BufferPiece piece;
      bool empty = false;
      for (size_t d = 0; d < shape.size(); ++d) {
        const int64_t lo = std::max(want.start[d], have.start[d]);
        const int64_t hi = std::min(want.limit[d], have.limit[d]);
        if (lo >= hi) empty = true;
        piece.add_source_start(lo - have.start[d]);
        piece.add_size(hi - lo);
        piece.add_dest_start(lo - want.start[d]);
      }
      if (empty && !shape.empty()) continue;
      const auto& shard = array.shards[c];
      if (absl::Status usable = shard->Usable(); !usable.ok() && lost.ok()) lost = usable;
      if (shard->worker() == worker) local_epoch = shard->made().epoch;
      SetSource(*shard, worker, &piece);
      covered += NumElements({piece.size().begin(), piece.size().end()});
      *request.add_pieces() = std::move(piece);
      sources.push_back(shard);
    }
    if (covered != NumElements(dims)) {
      return absl::InternalError("the source shards do not cover the resharded array");
    }
    if (!lost.ok()) {  // a part of it was lost: accepted, and using it says so
      out->shards[j] = RemoteBuffer::Lost(worker, device, lost);
      continue;
    }
    batch.Add(worker, local_epoch, std::move(request), std::move(sources), out, j);
  }
  out->sharding = std::move(sharding);
  return out;
}

absl::Status Session::HandleRemapArrays(const wire::RemapArraysRequest& request,
                                        wire::RemapArraysResponse* response) {
  ::xla::ifrt::RemapPlanProto plan;
  if (!plan.ParseFromString(request.plan()))
    return absl::InvalidArgumentError("malformed RemapPlan");
  if (plan.input_devices_for_output_size() == 0 && plan.mappings_size() > 0) {
    return absl::UnimplementedError(
        "RemapPlan in the form before IFRT SerDes 6 (interval mappings) is not supported");
  }
  if (plan.input_specs_size() != request.array_handles_size() ||
      plan.output_specs_size() != request.result_handles_size()) {
    return absl::InvalidArgumentError("RemapPlan does not match the request's arrays");
  }
  std::vector<std::shared_ptr<Array>> inputs;
  for (uint64_t handle : request.array_handles()) {
    SY_ASSIGN_OR_RETURN(auto array, arrays_.Get(handle));
    inputs.push_back(std::move(array));
  }
  std::vector<std::shared_ptr<Array>> outputs(plan.output_specs_size());
  for (const auto& entry : plan.input_devices_for_output()) {
    const int o = entry.out_array();
    if (o < 0 || o >= plan.output_specs_size() || outputs[o] != nullptr) {
      return absl::InvalidArgumentError("RemapPlan names a bad or repeated output");
    }
    const auto& spec = plan.output_specs(o);
    auto out = std::make_shared<Array>();
    SY_ASSIGN_OR_RETURN(out->dtype, FromDTypeProto(spec.dtype()));
    SY_ASSIGN_OR_RETURN(out->shape, FromShapeProto(spec.shape()));
    SY_ASSIGN_OR_RETURN(out->sharding, ParseSharding(spec.sharding()));
    // The output's shards, in its device order, are the listed input shards in order.
    for (const auto& source : entry.sources()) {
      if (source.in_array() < 0 || source.in_array() >= static_cast<int>(inputs.size())) {
        return absl::InvalidArgumentError("RemapPlan names a bad input");
      }
      const Array& input = *inputs[source.in_array()];
      for (int32_t device : source.devices().device_ids()) {
        const auto& list = input.sharding.devices;
        auto it = std::find(list.begin(), list.end(), device);
        if (it == list.end() || input.shards[it - list.begin()] == nullptr) {
          return absl::InvalidArgumentError(
              absl::StrCat("RemapPlan takes a shard on device ", device, " that the input lacks"));
        }
        out->shards.push_back(input.shards[it - list.begin()]);
      }
    }
    if (out->shards.size() != out->sharding.devices.size()) {
      return absl::InvalidArgumentError("RemapPlan gives an output the wrong number of shards");
    }
    for (size_t k = 0; k < out->shards.size(); ++k) {
      if (out->shards[k]->device() != out->sharding.devices[k]) {
        return absl::UnimplementedError("RemapArrays that moves shards between devices");
      }
    }
    outputs[o] = std::move(out);
  }
  for (int o = 0; o < plan.output_specs_size(); ++o) {
    if (outputs[o] == nullptr)
      return absl::InvalidArgumentError("RemapPlan leaves an output empty");
    SY_RETURN_IF_ERROR(arrays_.Add(request.result_handles(o), std::move(outputs[o])));
    response->add_array_handles(request.result_handles(o));
  }
  if (request.copy_semantics() == wire::ARRAY_COPY_SEMANTICS_DONATE_INPUT) {
    for (auto& input : inputs) input->deleted = true;
  }
  return absl::OkStatus();
}

absl::Status Session::HandleReshardArrays(const wire::ReshardArraysRequest& request,
                                          wire::ReshardArraysResponse* response) {
  if (request.array_specs_size() != request.array_handles_size() ||
      request.result_handles_size() != request.array_handles_size()) {
    return absl::InvalidArgumentError("one spec and one result handle per array are required");
  }
  const bool reuse = request.copy_semantics() != wire::ARRAY_COPY_SEMANTICS_ALWAYS_COPY;
  TransferBatch batch(id_, "reshard on");  // sent at the end, every array's at once
  for (int a = 0; a < request.array_handles_size(); ++a) {
    SY_ASSIGN_OR_RETURN(auto array, arrays_.Get(request.array_handles(a)));
    SY_ASSIGN_OR_RETURN(auto result, Reshard(*array, request.array_specs(a), reuse, batch));
    if (request.copy_semantics() == wire::ARRAY_COPY_SEMANTICS_DONATE_INPUT) array->deleted = true;
    SY_RETURN_IF_ERROR(arrays_.Add(request.result_handles(a), std::move(result)));
    response->add_array_handles(request.result_handles(a));
  }
  return absl::OkStatus();
}

// The shard of `array` that holds all of it in the host's dense order, when one does and
// can be read (a single-device or replicated array fetched without strides); else null.
static std::shared_ptr<RemoteBuffer> WholeShard(const Array& array,
                                                const std::vector<int64_t>& strides) {
  // Sub-byte types are unpacked on the way (InsertShard), tokens have no bytes.
  const int bits = ElementBits(array.dtype);
  if (array.dtype == STRING || !strides.empty() || bits == 0 || bits % 8 != 0) return nullptr;
  absl::StatusOr<ShardLayout> layout = LayoutShards(array.sharding, array.shape);
  if (!layout.ok()) return nullptr;
  for (size_t i = 0; i < array.shards.size(); ++i) {
    if (layout->holds[i] && array.shards[i] != nullptr &&
        layout->domains[i].shape() == array.shape && array.shards[i]->Usable().ok()) {
      return array.shards[i];
    }
  }
  return nullptr;
}

absl::Status Session::ReadOnLane(const RemoteBuffer& shard, std::shared_ptr<HostBuffer> host) {
  WorkerConnection* worker = shard.worker();
  return worker->ReadOnLane(
      shard.made(), shard.id(),
      [worker, id = shard.id(), host = std::move(host)](absl::StatusOr<std::string> bytes) {
        absl::Status status = bytes.status();
        if (status.ok() && static_cast<int64_t>(bytes->size()) != host->size()) {
          status = absl::DataLossError(absl::StrCat("worker ", worker->address(), " has buffer ",
                                                    id, " of ", bytes->size(), " bytes, not ",
                                                    host->size()));
        }
        if (status.ok()) status = host->Append(*bytes);
        host->Finish(status);
      });
}

absl::Status Session::CopyToHostBufferLater(const wire::CopyToHostBufferRequest& request,
                                            uint64_t op_id, bool* answered) {
  SY_ASSIGN_OR_RETURN(std::shared_ptr<Array> array, arrays_.Get(request.array_handle()));
  std::vector<int64_t> strides =
      DropDenseStrides(Strides(request.has_byte_strides(), request.byte_strides()), array->shape,
                       HostElementBytes(array->dtype));
  // The shard is held until the read is done, whatever becomes of the array.
  if (std::shared_ptr<RemoteBuffer> shard = WholeShard(*array, strides); shard != nullptr) {
    // Streamed: the client's lookup passes on the first bytes while the worker still
    // sends the rest, so the two hops overlap. Answered now (the client looks the buffer
    // up only after the answer); a failure reaches the client through its lookup.
    SY_ASSIGN_OR_RETURN(int64_t region,
                        HostRegionBytes(array->shape, strides, HostElementBytes(array->dtype)));
    // Read from the worker no further ahead of the client than the window.
    SY_ASSIGN_OR_RETURN(
        std::shared_ptr<HostBuffer> host,
        host_buffers_->Begin(request.host_buffer_handle(), region, limits::kHostBufferWindowBytes));
    if (region <= limits::kStreamReadMaxBytes && shard->worker()->TakesStreamReads() &&
        ReadOnLane(*shard, host).ok()) {
      *answered = true;
      return absl::OkStatus();
    }
    fetches_.Run([this, shard = std::move(shard), host] {
      trace::Scoped span("read from its worker", "transfer", id_);
      host->Finish(Guarded("CopyToHostBuffer", [&] {
        return StreamBuffer(shard->worker(), shard->id(), shard->made(), &calls_, *host);
      }));
    });
    *answered = true;
    return absl::OkStatus();
  }
  int64_t region = HostBuffer::kSizedByFill;  // strings: as long as their contents
  if (array->dtype != STRING) {
    SY_ASSIGN_OR_RETURN(region,
                        HostRegionBytes(array->shape, strides, HostElementBytes(array->dtype)));
  }
  // Visible to lookups at once; they wait for the bytes.
  SY_ASSIGN_OR_RETURN(std::shared_ptr<HostBuffer> host,
                      host_buffers_->Expect(request.host_buffer_handle(), region));
  // The thread gets a copy: the session may delete or donate the array meanwhile (its
  // shards stay alive, held by the copy, until the fetch is done).
  auto copy = std::make_shared<const Array>(*array);
  fetches_.Run([this, array = std::move(copy), strides = std::move(strides), host, op_id] {
    trace::Scoped span("read from its workers", "transfer", id_);
    absl::StatusOr<std::unique_ptr<HostBytes>> bytes =
        Guarded("CopyToHostBuffer", [&] { return FetchArray(*array, strides, &calls_); });
    absl::Status status = bytes.ok() ? host->Fill(*std::move(bytes)) : bytes.status();
    if (!status.ok()) host->Finish(status);
    AnswerLater(*sink_, op_id, status, [](wire::IfrtResponse* response) {
      response->mutable_copy_to_host_buffer_response();
    });
  });
  return absl::OkStatus();
}

absl::Status Session::CheckValueReadyLater(const wire::CheckValueReadyRequest& request,
                                           uint64_t op_id, std::optional<absl::Status>* now) {
  // Launch outputs settle by themselves (their workers say when they are computed);
  // the workers are asked only about other buffers.
  std::map<WorkerConnection*, std::vector<uint64_t>> by_worker;
  std::set<Completion*> pending;
  for (uint64_t handle : request.value_handles()) {
    SY_ASSIGN_OR_RETURN(auto array, arrays_.Get(handle));
    SY_RETURN_IF_ERROR(array->Usable());  // lost: known now, said now
    for (const auto& shard : array->shards) {
      if (shard == nullptr) continue;
      if (shard->computed() == nullptr) {
        by_worker[shard->worker()].push_back(shard->id());
      } else if (std::optional<absl::Status> settled = shard->computed()->Now();
                 !settled.has_value()) {
        pending.insert(shard->computed());
      } else if (!settled->ok()) {
        *now = *settled;  // a failed value is reported at once
        return absl::OkStatus();
      }
    }
  }
  if (by_worker.empty() && pending.empty()) {
    *now = absl::OkStatus();
    return absl::OkStatus();
  }
  // Runs on a worker connection's reader thread, maybe after the session has ended:
  // holds the sink, not the session.
  auto answer = [sink = sink_, op_id](const absl::Status& status) {
    AnswerLater(*sink, op_id, status, [](wire::IfrtResponse* response) {
      response->mutable_check_value_ready_response();
    });
  };
  // The last worker to answer (on its stream's reader thread) answers the client.
  auto all_ready = JoinStatuses(by_worker.size() + pending.size(), answer);
  for (const auto& [worker, ids] : by_worker) worker->AwaitThen(id_, ids, all_ready);
  for (Completion* completion : pending) {
    if (std::optional<absl::Status> settled = completion->NowOrThen(all_ready)) all_ready(*settled);
  }
  return absl::OkStatus();
}

absl::Status Session::HandleDeleteArray(const wire::DeleteArrayRequest& request,
                                        wire::DeleteArrayResponse* response) {
  absl::Status status;
  for (uint64_t handle : request.array_handle()) {
    auto array = arrays_.GetEvenIfDeleted(handle);
    if (!array.ok()) {
      if (status.ok()) status = array.status();
      continue;
    }
    (*array)->deleted = true;
    (*array)->shards.clear();  // frees the worker buffers no other array shares
  }
  response->set_deletion_future_handle(NewFuture(status));
  return absl::OkStatus();
}

absl::Status Session::HandleDestructArray(const wire::DestructArrayRequest& request) {
  std::vector<uint64_t> unknown;
  for (uint64_t handle : request.array_handle()) {
    if (!arrays_.Remove(handle).ok()) unknown.push_back(handle);
  }
  if (!unknown.empty()) {
    return absl::NotFoundError(
        absl::StrCat("Unknown array handles: ", absl::StrJoin(unknown, ",")));
  }
  return absl::OkStatus();
}

absl::Status Session::HandleIsArrayDeleted(const wire::IsArrayDeletedRequest& request,
                                           wire::IsArrayDeletedResponse* response) {
  SY_ASSIGN_OR_RETURN(auto array, arrays_.GetEvenIfDeleted(request.array_handle()));
  response->set_deleted(array->deleted);
  return absl::OkStatus();
}

absl::Status Session::HandleGetDefaultLayout(const wire::GetDefaultLayoutRequest& request,
                                             wire::GetDefaultLayoutResponse* response) {
  SY_RETURN_IF_ERROR(CheckedShape(request.dims(), "shape").status());
  SY_RETURN_IF_ERROR(SessionDevice(request.device_id()).status());
  // Dense row-major, written as XLA prints a layout: minor-to-major dimension list.
  std::vector<int64_t> minor_to_major;
  for (int d = request.dims_size() - 1; d >= 0; --d) minor_to_major.push_back(d);
  response->set_serialized_pjrt_layout(absl::StrCat("{", absl::StrJoin(minor_to_major, ","), "}"));
  return absl::OkStatus();
}

}  // namespace switchyard::proxy
