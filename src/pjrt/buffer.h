#pragma once

// A buffer on one device of a `Client`. Destroying it frees the device memory once
// pending work on it is done.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/host_bytes.h"
#include "pjrt/dtype.h"

struct PJRT_Buffer;

namespace switchyard::pjrt {

class Client;

class Buffer {
 public:
  // Takes ownership of `buffer`, which lives on `client`'s device `ordinal`.
  static absl::StatusOr<std::unique_ptr<Buffer>> Wrap(const Client* client, PJRT_Buffer* buffer);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int device_ordinal() const { return ordinal_; }
  // The device layout's dimension order, minor first (XLA's minor_to_major); empty if
  // the plugin does not say. Major-to-minor ({rank-1, ..., 0}) unless a program's client
  // chose another for its output (jax.jit(..., out_shardings=Format(Layout(...)))).
  const std::vector<int64_t>& minor_to_major() const { return minor_to_major_; }
  // "device", "pinned_host", ...; empty if the plugin does not say.
  const std::string& memory_kind() const { return memory_kind_; }
  // Bytes of the dense host copy.
  int64_t host_size_bytes() const { return host_size_bytes_; }

  // Waits until the buffer's contents are computed; returns the error that
  // produced it, if any (e.g. a failed launch).
  absl::Status AwaitReady() const;
  // Calls `done` (on a plugin thread; it must not block) once the contents are
  // computed, with the error that produced them, if any. The buffer may be
  // destroyed before then.
  void OnReady(std::function<void(absl::Status)> done) const;
  // Copies the contents to host, dense and major-to-minor; blocks until done. Into
  // HostBytes: a large copy reuses the pages of freed ones instead of faulting in new.
  absl::StatusOr<std::unique_ptr<HostBytes>> ToHost() const;
  // The same into `out`, which must have `host_size_bytes()`.
  absl::Status ToHost(absl::Span<char> out) const;
  // Whether `CopyRangeToHost` works: the plugin offers a raw copy and the device holds
  // exactly `host_size_bytes()` (its bytes are the dense host layout).
  bool can_copy_ranges() const { return raw_is_dense_; }
  // Bytes [offset, offset + out.size()) of the dense host copy, straight from the
  // device's own bytes: piece by piece, without a whole host copy first.
  // UNIMPLEMENTED unless `can_copy_ranges()`. Blocks until done.
  absl::Status CopyRangeToHost(int64_t offset, absl::Span<char> out) const;

  PJRT_Buffer* handle() const { return buffer_; }

 private:
  Buffer(const Client* client, PJRT_Buffer* buffer) : client_(client), buffer_(buffer) {}

  const Client* client_;
  PJRT_Buffer* buffer_;
  DType dtype_ = DType::kInvalid;
  std::vector<int64_t> dims_;
  int ordinal_ = 0;
  int64_t host_size_bytes_ = 0;
  bool raw_is_dense_ = false;  // the device bytes are the dense host layout
  std::vector<int64_t> minor_to_major_;
  bool major_to_minor_ = true;  // minor_to_major_ is {rank-1, ..., 0} (or unknown), untiled
  std::string memory_kind_;
};

}  // namespace switchyard::pjrt
