#include "pjrt/buffer.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/copy_count.h"
#include "common/dimension_order.h"
#include "common/status_macros.h"
#include "pjrt/c_api.h"
#include "pjrt/client.h"
#include "pjrt/event.h"

namespace switchyard::pjrt {

absl::StatusOr<std::unique_ptr<Buffer>> Buffer::Wrap(const Client* client, PJRT_Buffer* handle) {
  const PJRT_Api* api = client->api();
  // Owns `handle` from here on, so every early return frees it.
  auto buffer = std::unique_ptr<Buffer>(new Buffer(client, handle));

  Args<PJRT_Buffer_ElementType_Args> type;
  type->buffer = handle;
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Buffer_ElementType, type.get()));
  buffer->dtype_ = FromPjrtType(type->type);
  Args<PJRT_Buffer_Dimensions_Args> dims;
  dims->buffer = handle;
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Buffer_Dimensions, dims.get()));
  buffer->dims_.assign(dims->dims, dims->dims + dims->num_dims);
  Args<PJRT_Buffer_Device_Args> device;
  device->buffer = handle;
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(api, Buffer_Device, device.get()));
  buffer->ordinal_ = client->OrdinalOf(device->device);
  Args<PJRT_Buffer_Memory_Args> memory;
  memory->buffer = handle;
  if (SY_PJRT_CALL(api, Buffer_Memory, memory.get()).ok() && memory->memory != nullptr) {
    Args<PJRT_Memory_Kind_Args> kind;
    kind->memory = memory->memory;
    if (SY_PJRT_CALL(api, Memory_Kind, kind.get()).ok()) {
      buffer->memory_kind_.assign(kind->kind, kind->kind_size);
    }
  }
  int64_t elements = 1;
  for (int64_t dim : buffer->dims_) elements *= dim;
  buffer->host_size_bytes_ = HostByteSize(buffer->dtype_, elements);
  Args<PJRT_Buffer_GetMemoryLayout_Args> layout;
  layout->buffer = handle;
  layout->layout.struct_size = sizeof(PJRT_Buffer_MemoryLayout);
  // A token has no layout: the CPU plugin aborts when asked for one.
  if (BitWidth(buffer->dtype_) > 0 &&
      SY_PJRT_CALL(api, Buffer_GetMemoryLayout, layout.get()).ok() &&
      layout->layout.type == PJRT_Buffer_MemoryLayout_Type_Tiled) {
    const PJRT_Buffer_MemoryLayout_Tiled& tiled = layout->layout.tiled;
    buffer->minor_to_major_.assign(tiled.minor_to_major,
                                   tiled.minor_to_major + tiled.minor_to_major_size);
    buffer->major_to_minor_ = tiled.num_tiles == 0 && IsMajorToMinor(buffer->minor_to_major_);
  }
  // Padded, tiled or permuted device layouts are not the dense copy's bytes.
  Args<PJRT_Buffer_OnDeviceSizeInBytes_Args> on_device;
  on_device->buffer = handle;
  buffer->raw_is_dense_ =
      buffer->major_to_minor_ &&
      SY_PJRT_CALL(api, Buffer_OnDeviceSizeInBytes, on_device.get()).ok() &&
      static_cast<int64_t>(on_device->on_device_size_in_bytes) == buffer->host_size_bytes_ &&
      HasFunction(api, offsetof(PJRT_Api, PJRT_Buffer_CopyRawToHost),
                  reinterpret_cast<const void*>(api->PJRT_Buffer_CopyRawToHost));
  return buffer;
}

Buffer::~Buffer() {
  Args<PJRT_Buffer_Destroy_Args> args;
  args->buffer = buffer_;
  (void)SY_PJRT_CALL(client_->api(), Buffer_Destroy, args.get());
}

absl::Status Buffer::AwaitReady() const {
  Args<PJRT_Buffer_ReadyEvent_Args> args;
  args->buffer = buffer_;
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(client_->api(), Buffer_ReadyEvent, args.get()));
  return Event(client_->api(), args->event).Await();
}

void Buffer::OnReady(std::function<void(absl::Status)> done) const {
  const PJRT_Api* api = client_->api();
  Args<PJRT_Buffer_ReadyEvent_Args> ready;
  ready->buffer = buffer_;
  absl::Status status = SY_PJRT_CALL(api, Buffer_ReadyEvent, ready.get());
  if (!status.ok()) {
    done(status);
    return;
  }
  auto callback = std::make_shared<std::function<void(absl::Status)>>(std::move(done));
  PJRT_Event* unregistered =
      Event::Then(api, ready->event, [callback](absl::Status status) { (*callback)(status); });
  if (unregistered != nullptr) (*callback)(Event(api, unregistered).Await());  // wait here
}

absl::StatusOr<std::unique_ptr<HostBytes>> Buffer::ToHost() const {
  SY_ASSIGN_OR_RETURN(std::unique_ptr<HostBytes> out, HostBytes::Allocate(host_size_bytes_));
  SY_RETURN_IF_ERROR(ToHost(absl::MakeSpan(out->data(), out->size())));
  return out;
}

absl::Status Buffer::CopyRangeToHost(int64_t offset, absl::Span<char> out) const {
  if (!raw_is_dense_) {
    return absl::UnimplementedError("the device bytes of this buffer are not its dense host copy");
  }
  if (offset < 0 || offset + static_cast<int64_t>(out.size()) > host_size_bytes_) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset + out.size(),
                                              ") of a ", host_size_bytes_, "-byte buffer"));
  }
  if (out.empty()) return AwaitReady();
  Args<PJRT_Buffer_CopyRawToHost_Args> args;
  args->buffer = buffer_;
  args->dst = out.data();
  args->offset = offset;
  args->transfer_size = static_cast<int64_t>(out.size());
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(client_->api(), Buffer_CopyRawToHost, args.get()));
  CountCopied(out.size());
  return Event(client_->api(), args->event).Await();
}

absl::Status Buffer::ToHost(absl::Span<char> out) const {
  // Surface a failed producer as its own error rather than as a copy failure.
  SY_RETURN_IF_ERROR(AwaitReady());
  if (static_cast<int64_t>(out.size()) != host_size_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the buffer has ", host_size_bytes_, " bytes; the destination ", out.size()));
  }
  if (out.empty()) return absl::OkStatus();
  Args<PJRT_Buffer_ToHostBuffer_Args> args;
  args->src = buffer_;
  // Hosts hold arrays major-to-minor whatever the device's layout; the plugin transposes.
  const std::vector<int64_t> minor_to_major = MajorToMinor(dims_.size());
  Args<PJRT_Buffer_MemoryLayout> host_layout;
  if (!major_to_minor_) {
    host_layout->type = PJRT_Buffer_MemoryLayout_Type_Tiled;
    host_layout->tiled.struct_size = sizeof(PJRT_Buffer_MemoryLayout_Tiled);
    host_layout->tiled.minor_to_major = minor_to_major.data();
    host_layout->tiled.minor_to_major_size = minor_to_major.size();
    args->host_layout = host_layout.get();
  }
  args->dst = out.data();
  args->dst_size = out.size();
  SY_RETURN_IF_ERROR(SY_PJRT_CALL(client_->api(), Buffer_ToHostBuffer, args.get()));
  CountCopied(out.size());
  return Event(client_->api(), args->event).Await();
}

}  // namespace switchyard::pjrt
