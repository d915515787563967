#pragma once

// gRPC adapter for xla.ifrt.proxy.GrpcIfrtService: version negotiation, the
// session stream (metadata, session map, request pump) and the host-buffer RPCs.
// Request semantics live in `Session`.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/random/random.h"
#include "absl/synchronization/mutex.h"
#include "ifrt/grpc_ifrt_service.grpc.pb.h"
#include "proxy/fleet.h"
#include "proxy/host_buffer_store.h"

namespace switchyard::proxy {

class IfrtService final : public ::xla::ifrt::proxy::GrpcIfrtService::Service {
 public:
  // `num_elastic_slices`: see Session (-1: a session survives any number of slices down).
  IfrtService(Fleet* fleet, int num_elastic_slices)
      : fleet_(fleet), num_elastic_slices_(num_elastic_slices) {}

  grpc::Status GetVersion(grpc::ServerContext* context,
                          const ::xla::ifrt::proxy::GrpcGetVersionRequest* request,
                          ::xla::ifrt::proxy::GrpcGetVersionResponse* response) override;
  grpc::Status IfrtSession(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<::xla::ifrt::proxy::IfrtResponse, ::xla::ifrt::proxy::IfrtRequest>*
          stream) override;
  grpc::Status HostBufferStore(
      grpc::ServerContext* context,
      grpc::ServerReader<::xla::ifrt::proxy::GrpcHostBufferStoreRequest>* reader,
      ::xla::ifrt::proxy::GrpcHostBufferStoreResponse* response) override;
  grpc::Status HostBufferLookup(
      grpc::ServerContext* context, const ::xla::ifrt::proxy::GrpcHostBufferLookupRequest* request,
      grpc::ServerWriter<::xla::ifrt::proxy::GrpcHostBufferLookupResponse>* writer) override;
  grpc::Status HostBufferDelete(
      grpc::ServerContext* context, const ::xla::ifrt::proxy::GrpcHostBufferDeleteRequest* request,
      ::xla::ifrt::proxy::GrpcHostBufferDeleteResponse* response) override;
  grpc::Status HostBufferReadFromDisk(
      grpc::ServerContext* context,
      const ::xla::ifrt::proxy::GrpcHostBufferReadFromDiskRequest* request,
      ::xla::ifrt::proxy::GrpcHostBufferReadFromDiskResponse* response) override;

  int64_t sessions() const ABSL_LOCKS_EXCLUDED(mutex_);
  int64_t requests() const { return requests_.load(); }
  int64_t sessions_opened() const { return sessions_opened_.load(); }

 private:
  std::shared_ptr<proxy::HostBufferStore> FindStore(uint64_t session_id) const
      ABSL_LOCKS_EXCLUDED(mutex_);

  Fleet* fleet_;
  const int num_elastic_slices_;
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> sessions_opened_{0};
  mutable absl::Mutex mutex_;
  // Session ids are random: the host-buffer RPCs carry only an id and a handle.
  absl::BitGen random_ ABSL_GUARDED_BY(mutex_);
  std::map<uint64_t, std::shared_ptr<proxy::HostBufferStore>> stores_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace switchyard::proxy
