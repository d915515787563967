#include "worker/colocated_calls.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/shared_memory.h"
#include "common/status_macros.h"
#include "common/wire_numbers.h"
#include "pjrt/dtype.h"

namespace switchyard::worker {
namespace {

std::string WorldKey(const ColocatedCallRequest& request) {
  std::string key = absl::StrCat(request.host(), ":");
  for (const ColocatedHost& host : request.hosts()) {
    absl::StrAppend(&key, absl::StrJoin(host.device_ids(), ","), ";");
  }
  return key;
}

absl::StatusOr<int64_t> Elements(const google::protobuf::RepeatedField<int64_t>& dims) {
  return CheckedElements(absl::MakeConstSpan(dims.data(), dims.size()), "colocated array");
}

constexpr char kDirectoryPrefix[] = "switchyard-sidecar-";
// The sidecar.proto protocol this worker speaks (SidecarReply.protocol).
constexpr int kSidecarProtocol = 2;

// A new private directory (0700) in `shm_directory`, named by this process and at
// random: the name says nothing of the session. With `tmp` inside, for TMPDIR.
absl::StatusOr<std::string> MakePrivateDirectory(const std::string& shm_directory) {
  absl::BitGen random;
  const std::string directory =
      absl::StrCat(shm_directory, "/", kDirectoryPrefix, getpid(), "-",
                   absl::Hex(absl::Uniform<uint64_t>(random), absl::kZeroPad16));
  if (mkdir(directory.c_str(), 0700) != 0 || mkdir((directory + "/tmp").c_str(), 0700) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot create a directory in ", shm_directory, ": ", std::strerror(errno)));
  }
  return directory;
}

}  // namespace

void ColocatedCalls::RemoveStaleDirectories(const std::string& shm_directory) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(shm_directory, error)) {
    const std::string name = entry.path().filename().string();
    absl::string_view rest = name;
    pid_t pid = 0;
    if (!absl::ConsumePrefix(&rest, kDirectoryPrefix) ||
        !absl::SimpleAtoi(rest.substr(0, rest.find('-')), &pid) || pid <= 0) {
      continue;
    }
    struct stat st;
    if (lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
      continue;
    }
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // its worker still runs
    std::error_code ignored;
    std::filesystem::remove_all(entry.path(), ignored);
  }
}

ColocatedCalls::Sidecar::~Sidecar() {
  absl::MutexLock lock(&mutex);
  process.reset();
  if (!directory.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(directory, ignored);
  }
}

std::shared_ptr<ColocatedCalls::Sidecar> ColocatedCalls::SidecarFor(uint64_t owner,
                                                                    uint64_t session) {
  std::shared_ptr<Sidecar> doomed;  // stopped outside the lock
  absl::MutexLock lock(&mutex_);
  std::shared_ptr<Sidecar>& sidecar = sidecars_[{owner, session}];
  if (sidecar == nullptr) {
    sidecar = std::make_shared<Sidecar>();
    sidecar->owner = owner;
    if (static_cast<int64_t>(sidecars_.size()) > limits::kSidecarsMax) {
      auto oldest = sidecars_.end();
      for (auto it = sidecars_.begin(); it != sidecars_.end(); ++it) {
        if (it->second == sidecar) continue;
        if (oldest == sidecars_.end() || it->second->last_used < oldest->second->last_used)
          oldest = it;
      }
      if (oldest != sidecars_.end()) {
        doomed = std::move(oldest->second);
        sidecars_.erase(oldest);
      }
    }
  }
  sidecar->last_used = ++clock_;
  std::shared_ptr<Sidecar> found = sidecar;
  if (doomed != nullptr) {
    const pid_t pid = doomed->pid.load();
    if (pid > 0) kill(pid, SIGKILL);
  }
  return found;
}

absl::Status ColocatedCalls::EnsureStarted(Sidecar& sidecar, const ColocatedCallRequest& request) {
  const std::string world = WorldKey(request);
  if (sidecar.process != nullptr && sidecar.process->alive() && sidecar.world == world) {
    return absl::OkStatus();
  }
  sidecar.process.reset();
  sidecar.pid = 0;
  if (request.host() < 0 || request.host() >= request.hosts_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("host ", request.host(), " of ", request.hosts_size()));
  }
  if (sidecar.directory.empty()) {
    SY_ASSIGN_OR_RETURN(sidecar.directory, MakePrivateDirectory(options_.shm_directory));
    absl::MutexLock lock(&mutex_);
    sidecar.label = absl::StrCat("sidecar-", ++next_sidecar_);
  }
  SandboxPolicy sandbox;
  sandbox.hidden = options_.hidden;
  sandbox.writable = options_.writable;
  sandbox.shared_directory = options_.shm_directory;
  sandbox.own_directory = sidecar.directory;
  SY_ASSIGN_OR_RETURN(std::unique_ptr<SidecarProcess> process,
                      SidecarProcess::Spawn(options_.python, sidecar.label, sidecar.directory,
                                            options_.sandbox ? &sandbox : nullptr));
  sidecar.pid = process->pid();
  SidecarRequest start;
  *start.mutable_start()->mutable_hosts() = request.hosts();
  start.mutable_start()->set_host(request.host());
  absl::StatusOr<SidecarReply> reply =
      process->Call(start, absl::Now() + absl::Milliseconds(limits::kSidecarStartMs));
  if (!reply.ok()) {
    sidecar.pid = 0;
    return absl::Status(reply.status().code(),
                        absl::StrCat("the sidecar did not start (", options_.python,
                                     " -m switchyard.sidecar): ", reply.status().message()));
  }
  if (reply->code() != 0) {
    sidecar.pid = 0;
    return absl::Status(static_cast<absl::StatusCode>(reply->code()),
                        absl::StrCat("the sidecar could not start: ", reply->message()));
  }
  if (reply->protocol() < kSidecarProtocol) {
    sidecar.pid = 0;
    return absl::FailedPreconditionError(
        absl::StrCat("the sidecar (", options_.python, " -m switchyard.sidecar) speaks protocol ",
                     reply->protocol(), "; this worker needs ", kSidecarProtocol,
                     ": install the worker's release of the switchyard package there"));
  }
  SY_LOG(Info) << "colocated Python " << sidecar.label << " started (pid " << process->pid()
               << ", Python " << reply->python_version() << ", jax " << reply->jax_version()
               << ", process " << request.host() << " of " << request.hosts_size()
               << (options_.sandbox ? ", sandboxed)" : ", not sandboxed)");
  sidecar.process = std::move(process);
  sidecar.world = world;
  return absl::OkStatus();
}

absl::Status ColocatedCalls::Call(Sidecar& sidecar, const ColocatedCallRequest& request,
                                  uint64_t owner, const std::function<bool()>& cancelled) {
  SidecarRequest message;
  SidecarCall* run = message.mutable_run();
  run->set_name(request.name());
  run->set_program(request.program());
  std::vector<int> pass_fds;
  SY_ASSIGN_OR_RETURN(std::shared_ptr<SharedMemoryFile> inputs, PackInputs(sidecar, request, run));
  if (inputs != nullptr) pass_fds.push_back(inputs->fd());
  SY_ASSIGN_OR_RETURN(const int64_t output_end, LayOutOutputs(request, run));
  // Claimed before the sidecar fills them, for as long as the buffers are being made.
  SY_ASSIGN_OR_RETURN(BufferStore::Reservation memory, buffers_->Reserve(output_end, [] {
    return std::string("the outputs of a colocated call");
  }));
  std::shared_ptr<SharedMemoryFile> outputs;
  if (output_end > 0) {
    SY_ASSIGN_OR_RETURN(outputs, sidecar.files.Take(SharedMemoryFile::PartStart(output_end)));
    run->set_outputs_file(true);
    pass_fds.push_back(outputs->fd());
  }
  {
    absl::MutexLock lock(&mutex_);
    message.set_call(++next_call_);
  }
  const absl::Time deadline = request.timeout_ms() > 0
                                  ? absl::Now() + absl::Milliseconds(request.timeout_ms())
                                  : absl::InfiniteFuture();  // bounded by the session's end
  absl::StatusOr<SidecarReply> reply =
      sidecar.process->Call(message, deadline, cancelled, pass_fds);
  if (!reply.ok()) {
    sidecar.pid = 0;
    return absl::Status(reply.status().code(),
                        absl::StrCat(reply.status().message(),
                                     " while running it; the next call starts a new sidecar "
                                     "(module state is lost)"));
  }
  if (reply->code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(reply->code()), reply->message());
  }
  if (reply->outputs_size() != request.outputs_size()) {
    return absl::InternalError("the sidecar answered with another number of outputs");
  }
  return StoreOutputs(request, *run, *reply, outputs.get(), owner);
}

absl::StatusOr<std::shared_ptr<SharedMemoryFile>> ColocatedCalls::PackInputs(
    Sidecar& sidecar, const ColocatedCallRequest& request, SidecarCall* run) {
  // The inputs' bytes go into one sealed memory file, each shard on its own pages.
  std::vector<std::pair<std::shared_ptr<const StoredBuffer>, const SidecarShard*>> to_copy;
  int64_t input_end = 0;
  for (int a = 0; a < request.inputs_size(); ++a) {
    SidecarArray* array = run->add_inputs();
    for (int k = 0; k < request.inputs(a).shards_size(); ++k) {
      const ColocatedShard& shard = request.inputs(a).shards(k);
      absl::StatusOr<std::shared_ptr<const StoredBuffer>> stored =
          buffers_->GetAny(shard.buffer_id());
      if (!stored.ok()) {
        return absl::Status(stored.status().code(),
                            absl::StrCat("input ", a, ": ", stored.status().message()));
      }
      SidecarShard* out = array->add_shards();
      out->set_device_id(shard.device_id());
      if ((*stored)->is_strings) {
        out->set_dtype(STRING);
        out->mutable_dims()->Add((*stored)->dims.begin(), (*stored)->dims.end());
        for (const std::string& element : (*stored)->strings) out->add_strings(element);
        continue;
      }
      const pjrt::Buffer& buffer = *(*stored)->buffer;
      out->set_dtype(static_cast<DType>(buffer.dtype()));
      out->mutable_dims()->Add(buffer.dims().begin(), buffer.dims().end());
      out->set_offset(SharedMemoryFile::PartStart(input_end));
      out->set_bytes(buffer.host_size_bytes());
      input_end = out->offset() + out->bytes();
      to_copy.emplace_back(*std::move(stored), out);
    }
  }
  std::shared_ptr<SharedMemoryFile> inputs;
  if (input_end > 0) {
    SY_ASSIGN_OR_RETURN(inputs, sidecar.files.Take(SharedMemoryFile::PartStart(input_end)));
    SY_ASSIGN_OR_RETURN(std::unique_ptr<HostBytes> mapped, inputs->MapPart(0, input_end));
    for (const auto& [stored, shard] : to_copy) {
      SY_RETURN_IF_ERROR(
          stored->buffer->ToHost(absl::MakeSpan(mapped->data() + shard->offset(), shard->bytes())));
    }
    run->set_inputs_file(true);
  }
  return inputs;
}

absl::StatusOr<int64_t> ColocatedCalls::LayOutOutputs(const ColocatedCallRequest& request,
                                                      SidecarCall* run) const {
  // The outputs' bytes go into one sealed memory file, each shard on its own pages, and
  // become the device buffers where they are (mapped, not read).
  int64_t output_end = 0;
  for (int o = 0; o < request.outputs_size(); ++o) {
    SidecarArray* array = run->add_outputs();
    for (int k = 0; k < request.outputs(o).shards_size(); ++k) {
      const ColocatedShard& shard = request.outputs(o).shards(k);
      SY_ASSIGN_OR_RETURN(int64_t elements, Elements(shard.dims()));
      SidecarShard* out = array->add_shards();
      out->set_device_id(shard.device_id());
      out->set_dtype(shard.dtype());
      *out->mutable_dims() = shard.dims();
      if (shard.dtype() == STRING) continue;
      const int64_t bytes = pjrt::HostByteSize(static_cast<pjrt::DType>(shard.dtype()), elements);
      // One array's bound for them all keeps the sum inside int64.
      if (output_end + bytes > limits::kHostRegionBytesMax) {
        return absl::InvalidArgumentError(absl::StrCat("output ", o,
                                                       ": the outputs of one call take more than ",
                                                       limits::kHostRegionBytesMax, " bytes"));
      }
      out->set_offset(SharedMemoryFile::PartStart(output_end));
      out->set_bytes(bytes);
      output_end = out->offset() + bytes;
    }
  }
  return output_end;
}

absl::Status ColocatedCalls::StoreOutputs(const ColocatedCallRequest& request,
                                          const SidecarCall& run, const SidecarReply& reply,
                                          SharedMemoryFile* outputs, uint64_t owner) {
  for (int o = 0; o < request.outputs_size(); ++o) {
    for (int k = 0; k < request.outputs(o).shards_size(); ++k) {
      const ColocatedShard& want = request.outputs(o).shards(k);
      const SidecarShard* got =
          k < reply.outputs(o).shards_size() ? &reply.outputs(o).shards(k) : nullptr;
      if (got == nullptr || got->device_id() != want.device_id()) {
        return absl::InternalError(absl::StrCat(
            "output ", o, ": the sidecar sent no shard for device ", want.device_id()));
      }
      std::vector<int64_t> dims(want.dims().begin(), want.dims().end());
      SY_ASSIGN_OR_RETURN(int64_t elements, Elements(want.dims()));
      if (want.dtype() == STRING) {
        if (got->strings_size() != elements) {
          return absl::InternalError(absl::StrCat("output ", o, ": ", got->strings_size(),
                                                  " strings for ", elements, " elements"));
        }
        SY_RETURN_IF_ERROR(buffers_->AddStrings(want.buffer_id(), want.device_id(), dims,
                                                {got->strings().begin(), got->strings().end()},
                                                owner));
        continue;
      }
      const auto dtype = static_cast<pjrt::DType>(want.dtype());
      SY_ASSIGN_OR_RETURN(int ordinal, devices_->OrdinalOf(want.device_id()));
      const int64_t bytes = pjrt::HostByteSize(dtype, elements);
      // Where this worker put it, whatever the reply says.
      const SidecarShard& part = run.outputs(o).shards(k);
      std::shared_ptr<HostBytes> data;
      if (bytes == 0) {
        SY_ASSIGN_OR_RETURN(data, HostBytes::Allocate(0));
      } else {
        SY_ASSIGN_OR_RETURN(data, outputs->MapPart(part.offset(), bytes));
      }
      SY_ASSIGN_OR_RETURN(auto buffer,
                          client_->BufferFromOwnedHost(std::move(data), dtype, dims, ordinal));
      SY_RETURN_IF_ERROR(
          buffers_->Add(want.buffer_id(), want.device_id(), std::move(buffer), owner));
    }
  }
  return absl::OkStatus();
}

absl::Status ColocatedCalls::Run(const ColocatedCallRequest& request, uint64_t owner,
                                 const std::function<bool()>& cancelled) {
  absl::Status status = [&]() -> absl::Status {
    if (options_.python.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "this worker runs no colocated Python: ",
          options_.off_reason.empty()
              ? "start it with --python=<an interpreter with jax, cloudpickle and switchyard>"
              : options_.off_reason));
    }
    std::shared_ptr<Sidecar> sidecar = SidecarFor(owner, request.session());
    absl::MutexLock lock(&sidecar->mutex);
    SY_RETURN_IF_ERROR(EnsureStarted(*sidecar, request));
    return Call(*sidecar, request, owner, cancelled);
  }();
  if (status.ok()) return status;
  status = absl::Status(status.code(), absl::StrCat("colocated Python function '", request.name(),
                                                    "': ", status.message()));
  for (const ColocatedArray& output : request.outputs()) {
    for (const ColocatedShard& shard : output.shards()) {
      if (!buffers_->Contains(shard.buffer_id()))
        buffers_->AddError(shard.buffer_id(), status, owner);
    }
  }
  return status;
}

void ColocatedCalls::EndSession(uint64_t owner, uint64_t session) {
  StopWhere([owner, session](const Key& key) { return key == Key{owner, session}; });
}

void ColocatedCalls::EndOwner(uint64_t owner) {
  StopWhere([owner](const Key& key) { return key.first == owner; });
}

void ColocatedCalls::StopWhere(const std::function<bool(const Key&)>& doomed_key) {
  std::vector<std::shared_ptr<Sidecar>> doomed;
  {
    absl::MutexLock lock(&mutex_);
    for (auto it = sidecars_.begin(); it != sidecars_.end();) {
      if (!doomed_key(it->first)) {
        ++it;
        continue;
      }
      doomed.push_back(std::move(it->second));
      it = sidecars_.erase(it);
    }
  }
  // A call still running sees its sidecar end, fails, and frees it.
  for (const auto& sidecar : doomed) {
    const pid_t pid = sidecar->pid.load();
    if (pid > 0) kill(pid, SIGKILL);
  }
}

int64_t ColocatedCalls::sidecars() const {
  absl::MutexLock lock(&mutex_);
  return sidecars_.size();
}

}  // namespace switchyard::worker
