// Session handlers for arrays: creation from host buffers, assembly and
// disassembly, copies, fetches, readiness and deletion.

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "proxy/ifrt_convert.h"
#include "proxy/session.h"
#include "proxy/worker_calls.h"

namespace switchyard::proxy {
namespace {

// How long a request that consumes a client upload waits for the bytes.
constexpr absl::Duration kHostBufferWait = absl::Minutes(10);

std::vector<int64_t> Strides(bool has, const wire::ByteStrides& strides) {
  if (!has) return {};
  return {strides.strides().begin(), strides.strides().end()};
}

}  // namespace

absl::StatusOr<std::shared_ptr<Array>> Session::PutHostArray(
    DType dtype, std::vector<int64_t> shape, Sharding sharding, const std::string& host,
    const std::vector<int64_t>& byte_strides) {
  for (int64_t device : sharding.devices) SY_RETURN_IF_ERROR(SessionDevice(device).status());
  SY_ASSIGN_OR_RETURN(ShardLayout layout, LayoutShards(sharding, shape));
  auto array = std::make_shared<Array>();
  array->dtype = dtype;
  array->shape = shape;
  array->shards.resize(sharding.devices.size());
  const int64_t element_bytes = ElementBytes(dtype);
  for (size_t i = 0; i < sharding.devices.size(); ++i) {
    if (!layout.holds[i]) continue;
    const int64_t device = sharding.devices[i];
    SY_ASSIGN_OR_RETURN(std::string data,
                        ExtractShard(host, shape, byte_strides, element_bytes, layout.domains[i]));
    SY_ASSIGN_OR_RETURN(WorkerConnection * worker, WorkerOf(device));
    const uint64_t id = NewWorkerObjectId();
    SY_RETURN_IF_ERROR(PutBuffer(worker, id, device, dtype, layout.domains[i].shape(), data));
    array->shards[i] = std::make_shared<RemoteBuffer>(worker, id, device);
  }
  array->sharding = std::move(sharding);
  return array;
}

absl::StatusOr<std::string> Session::FetchArray(const Array& array,
                                                const std::vector<int64_t>& byte_strides) {
  SY_ASSIGN_OR_RETURN(ShardLayout layout, LayoutShards(array.sharding, array.shape));
  const int64_t element_bytes = ElementBytes(array.dtype);
  SY_ASSIGN_OR_RETURN(int64_t region, HostRegionBytes(array.shape, byte_strides, element_bytes));
  std::string host(region, '\0');
  std::vector<IndexDomain> done;  // replicated shards are fetched once
  for (size_t i = 0; i < array.shards.size(); ++i) {
    if (!layout.holds[i] || array.shards[i] == nullptr) continue;
    if (std::find(done.begin(), done.end(), layout.domains[i]) != done.end()) continue;
    const RemoteBuffer& shard = *array.shards[i];
    SY_ASSIGN_OR_RETURN(std::string data, GetBuffer(shard.worker(), shard.id()));
    SY_RETURN_IF_ERROR(InsertShard(data, array.shape, byte_strides, element_bytes,
                                   layout.domains[i], &host));
    done.push_back(layout.domains[i]);
  }
  return host;
}

absl::StatusOr<std::shared_ptr<RemoteBuffer>> Session::CopyShard(const Array& array, size_t index,
                                                                 int64_t to_device) {
  std::shared_ptr<RemoteBuffer> from = array.shards[index];
  if (from->device() == to_device) return from;
  SY_ASSIGN_OR_RETURN(ShardLayout layout, LayoutShards(array.sharding, array.shape));
  SY_ASSIGN_OR_RETURN(WorkerConnection * worker, WorkerOf(to_device));
  AssembleBufferRequest request;
  BufferHeader* header = request.mutable_header();
  header->set_buffer_id(NewWorkerObjectId());
  header->set_device_id(to_device);
  header->set_dtype(array.dtype);
  const std::vector<int64_t> dims = layout.domains[index].shape();
  header->mutable_dims()->Add(dims.begin(), dims.end());
  header->set_size_bytes(NumElements(dims) * ElementBytes(array.dtype));
  BufferPiece* piece = request.add_pieces();
  piece->set_source_address(from->worker() == worker ? "" : from->worker()->address());
  piece->set_source_buffer_id(from->id());
  auto copy = std::make_shared<RemoteBuffer>(worker, header->buffer_id(), to_device);
  // The destination pulls straight from the source worker; `from` stays alive
  // (not deleted on its worker) until the pull is done.
  worker->Enqueue([worker, from, request = std::move(request)] {
    absl::Status status = AssembleBuffer(worker, request);
    if (!status.ok()) SY_LOG(Warning) << "transfer to " << worker->address() << " failed: " << status;
  });
  return copy;
}

absl::Status Session::HandleMakeArrayFromHostBuffer(
    const wire::MakeArrayFromHostBufferRequest& request,
    wire::MakeArrayFromHostBufferResponse* response) {
  const uint64_t handle =
      request.has_array_handle() ? request.array_handle() : request.host_buffer_handle();
  SY_ASSIGN_OR_RETURN(auto host, host_buffers_->Lookup(request.host_buffer_handle(), kHostBufferWait, cancelled_));
  (void)host_buffers_->Delete(request.host_buffer_handle());
  SY_ASSIGN_OR_RETURN(DType dtype, FromDTypeProto(request.dtype()));
  SY_ASSIGN_OR_RETURN(Sharding sharding, ParseSharding(request.sharding()));
  SY_ASSIGN_OR_RETURN(auto array,
                      PutHostArray(dtype, FromShapeProto(request.shape()), std::move(sharding),
                                   *host, Strides(request.has_byte_strides(), request.byte_strides())));
  SY_RETURN_IF_ERROR(arrays_.Add(handle, std::move(array)));
  response->set_array_handle(handle);
  return absl::OkStatus();
}

absl::Status Session::HandleMakeArraysFromHostBufferShards(
    const wire::MakeArraysFromHostBufferShardsRequest& request,
    wire::MakeArraysFromHostBufferShardsResponse* response) {
  if (request.array_handles_size() != request.specs_size()) {
    return absl::InvalidArgumentError("one array handle per spec is required");
  }
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
    array->shape = FromShapeProto(spec.array_spec().shape());
    array->shards.resize(sharding.devices.size());
    for (int b = 0; b < spec.host_buffers_size(); ++b) {
      const auto& buffer = spec.host_buffers(b);
      SY_ASSIGN_OR_RETURN(auto host,
                          host_buffers_->Lookup(buffer.host_buffer_handle(), kHostBufferWait, cancelled_));
      (void)host_buffers_->Delete(buffer.host_buffer_handle());
      const std::vector<int64_t> shard_shape = FromShapeProto(buffer.shape());
      IndexDomain whole{std::vector<int64_t>(shard_shape.size(), 0), shard_shape};
      SY_ASSIGN_OR_RETURN(std::string data,
                          ExtractShard(*host, shard_shape,
                                       Strides(buffer.has_byte_strides(), buffer.byte_strides()),
                                       ElementBytes(dtype), whole));
      for (int64_t index : spec.addressable_shard_indices(b).indices()) {
        if (index < 0 || index >= static_cast<int64_t>(sharding.devices.size())) {
          return absl::InvalidArgumentError(absl::StrCat("shard index ", index, " out of range"));
        }
        const int64_t device = sharding.devices[index];
        SY_ASSIGN_OR_RETURN(WorkerConnection * worker, WorkerOf(device));
        const uint64_t id = NewWorkerObjectId();
        SY_RETURN_IF_ERROR(PutBuffer(worker, id, device, dtype, shard_shape, data));
        array->shards[index] = std::make_shared<RemoteBuffer>(worker, id, device);
      }
    }
    array->sharding = std::move(sharding);
    SY_RETURN_IF_ERROR(arrays_.Add(request.array_handles(s), std::move(array)));
    response->add_array_handles(request.array_handles(s));
  }
  return absl::OkStatus();
}

absl::Status Session::HandleAssemble(const wire::AssembleArrayFromSingleDeviceArraysRequest& request,
                                     wire::AssembleArrayFromSingleDeviceArraysResponse* response) {
  SY_ASSIGN_OR_RETURN(Sharding sharding, ParseSharding(request.sharding()));
  if (static_cast<size_t>(request.single_device_array_handles_size()) != sharding.devices.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the sharding has ", sharding.devices.size(), " devices but ",
        request.single_device_array_handles_size(), " single-device arrays were given"));
  }
  auto array = std::make_shared<Array>();
  array->shape = FromShapeProto(request.shape());
  array->shards.resize(sharding.devices.size());
  for (size_t i = 0; i < sharding.devices.size(); ++i) {
    SY_ASSIGN_OR_RETURN(auto part, arrays_.Get(request.single_device_array_handles(i)));
    if (part->shards.size() != 1 || part->shards[0] == nullptr) {
      return absl::InvalidArgumentError("AssembleArrayFromSingleDeviceArrays needs single-device arrays");
    }
    if (part->shards[0]->device() != sharding.devices[i]) {
      return absl::InvalidArgumentError(absl::StrCat("shard ", i, " lives on device ",
                                                     part->shards[0]->device(), ", the sharding says ",
                                                     sharding.devices[i]));
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
  if (!array->sharding.IsFullyReplicated() || array->shards.empty() || array->shards[0] == nullptr) {
    return absl::InvalidArgumentError("FullyReplicatedShard of an array that is not fully replicated");
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
  if (request.has_memory_kind() && !request.memory_kind().empty() &&
      request.memory_kind() != "device") {
    return absl::UnimplementedError(absl::StrCat("copies to memory kind '", request.memory_kind(),
                                                 "' are not supported yet"));
  }
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
    copy->shards.resize(devices.size());
    for (size_t i = 0; i < devices.size(); ++i) {
      SY_RETURN_IF_ERROR(SessionDevice(devices[i]).status());
      if (array->shards[i] == nullptr) continue;
      SY_ASSIGN_OR_RETURN(copy->shards[i], CopyShard(*array, i, devices[i]));
    }
    if (request.copy_semantics() == wire::ARRAY_COPY_SEMANTICS_DONATE_INPUT) array->deleted = true;
    SY_RETURN_IF_ERROR(arrays_.Add(request.result_handles(a), std::move(copy)));
    response->add_array_handles(request.result_handles(a));
  }
  return absl::OkStatus();
}

absl::Status Session::HandleCopyToHostBuffer(const wire::CopyToHostBufferRequest& request) {
  SY_ASSIGN_OR_RETURN(auto array, arrays_.Get(request.array_handle()));
  SY_ASSIGN_OR_RETURN(std::string host,
                      FetchArray(*array, Strides(request.has_byte_strides(), request.byte_strides())));
  return host_buffers_->Store(request.host_buffer_handle(), std::move(host));
}

absl::Status Session::HandleCheckValueReady(const wire::CheckValueReadyRequest& request) {
  std::map<WorkerConnection*, std::vector<uint64_t>> by_worker;
  for (uint64_t handle : request.value_handles()) {
    SY_ASSIGN_OR_RETURN(auto array, arrays_.Get(handle));
    for (const auto& shard : array->shards) {
      if (shard != nullptr) by_worker[shard->worker()].push_back(shard->id());
    }
  }
  for (const auto& [worker, ids] : by_worker) SY_RETURN_IF_ERROR(AwaitBuffers(worker, ids));
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
    return absl::NotFoundError(absl::StrCat("Unknown array handles: ", absl::StrJoin(unknown, ",")));
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
  // Dense row-major, written as XLA prints a layout: minor-to-major dimension list.
  std::vector<int64_t> minor_to_major;
  for (int d = request.dims_size() - 1; d >= 0; --d) minor_to_major.push_back(d);
  response->set_serialized_pjrt_layout(absl::StrCat("{", absl::StrJoin(minor_to_major, ","), "}"));
  return absl::OkStatus();
}

}  // namespace switchyard::proxy
