#include "common/grpc_server.h"

#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/files.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/malformed_requests.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"

namespace switchyard {
namespace {

constexpr absl::string_view kInProcessScheme = "inproc:";

// In-process servers by address. A server outlives its entry (StartedServer's order).
struct InProcessServers {
  absl::Mutex mutex;
  uint64_t next ABSL_GUARDED_BY(mutex) = 1;
  absl::flat_hash_map<std::string, grpc::Server*> servers ABSL_GUARDED_BY(mutex);
};

// Set once at start (`UseFleetTls`), read by every server and channel after.
struct FleetTls {
  absl::Mutex mutex;
  bool enabled ABSL_GUARDED_BY(mutex) = false;
  std::string ca ABSL_GUARDED_BY(mutex);
  std::string cert ABSL_GUARDED_BY(mutex);
  std::string key ABSL_GUARDED_BY(mutex);
};

FleetTls& Tls() {
  static auto* tls = new FleetTls;  // never destroyed: used until exit
  return *tls;
}

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path,
                                    absl::string_view marker) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": ", text.status().message()));
  }
  if (!absl::StrContains(*text, marker)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": not a PEM file with a '", marker, "' block"));
  }
  return text;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(Audience audience) {
  FleetTls& tls = Tls();
  absl::MutexLock lock(&tls.mutex);
  if (audience == Audience::kClients || !tls.enabled) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls.ca;
  options.pem_key_cert_pairs.push_back({tls.key, tls.cert});
  return grpc::SslServerCredentials(options);
}

InProcessServers& InProcess() {
  static auto* servers = new InProcessServers;  // never destroyed: used until exit
  return *servers;
}

grpc::ChannelArguments ChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(limits::kGrpcMessageBytesMax);
  args.SetMaxSendMessageSize(limits::kGrpcMessageBytesMax);
  // Peers restart in well under gRPC's default 1 s..120 s reconnect backoff; keep
  // reconnects quick so a returning RM or worker is seen at once.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 100);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, limits::kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, limits::kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return args;
}

}  // namespace

InProcessName& InProcessName::operator=(InProcessName&& other) noexcept {
  if (this != &other) {
    InProcessName gone(std::move(*this));
    address_ = std::move(other.address_);
    other.address_.clear();
  }
  return *this;
}

InProcessName::~InProcessName() {
  if (address_.empty()) return;
  InProcessServers& in_process = InProcess();
  absl::MutexLock lock(&in_process.mutex);
  in_process.servers.erase(address_);
}

void StartedServer::Shutdown(std::chrono::system_clock::time_point deadline) {
  if (unix_listener != nullptr) unix_listener->Stop();
  if (server != nullptr) server->Shutdown(deadline);
}

std::string ServeHost(const std::string& listen_host, const std::string& unix_socket) {
  return unix_socket.empty() ? listen_host : absl::StrCat(kUnixScheme, unix_socket);
}

std::string PeerIdentity(absl::string_view peer) {
  if (std::optional<PeerCredentials> unix_peer = UnixPeer(peer); unix_peer.has_value()) {
    return absl::StrCat("unix pid ", unix_peer->pid);
  }
  if (!absl::StartsWith(peer, "ipv4:") && !absl::StartsWith(peer, "ipv6:")) {
    return std::string(peer);  // inproc: names no port
  }
  const size_t colon = peer.rfind(':');
  return std::string(colon <= 4 ? peer : peer.substr(0, colon));
}

absl::Status UseFleetTls(const std::string& ca_file, const std::string& cert_file,
                         const std::string& key_file) {
  SY_ASSIGN_OR_RETURN(std::string ca, ReadPem("tls_ca_file", ca_file, "CERTIFICATE-----"));
  SY_ASSIGN_OR_RETURN(std::string cert, ReadPem("tls_cert_file", cert_file, "CERTIFICATE-----"));
  SY_ASSIGN_OR_RETURN(std::string key, ReadPem("tls_key_file", key_file, "PRIVATE KEY-----"));
  FleetTls& tls = Tls();
  absl::MutexLock lock(&tls.mutex);
  tls.enabled = true;
  tls.ca = std::move(ca);
  tls.cert = std::move(cert);
  tls.key = std::move(key);
  return absl::OkStatus();
}

bool FleetTlsEnabled() {
  FleetTls& tls = Tls();
  absl::MutexLock lock(&tls.mutex);
  return tls.enabled;
}

absl::StatusOr<StartedServer> StartGrpcServer(const std::string& host, int port,
                                              const std::vector<grpc::Service*>& services,
                                              Audience audience) {
  grpc::ServerBuilder builder;
  StartedServer started;
  const bool in_process = host == kInProcessHost;
  const bool unix_socket = absl::StartsWith(host, kUnixScheme);
  std::string address = absl::StrCat(host, ":", port);
  if (!in_process && !unix_socket) {
    builder.AddListeningPort(address, ServerCredentials(audience), &started.port);
  }
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(limits::kGrpcMessageBytesMax);
  builder.SetMaxSendMessageSize(limits::kGrpcMessageBytesMax);
  // A peer that vanishes without closing its connection (a host gone dark, a stopped
  // process) is noticed by keepalive pings: its streams end, and so do waits on them.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, limits::kKeepaliveTimeMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, limits::kKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Clients (ours, and jaxlib's) may ping as often as they like.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             limits::kKeepaliveTimeMs / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(MalformedRequestInterceptors());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  started.server = builder.BuildAndStart();
  if (in_process) {
    if (started.server == nullptr) return absl::InternalError("cannot start an in-process server");
    InProcessServers& registry = InProcess();
    absl::MutexLock lock(&registry.mutex);
    started.address = absl::StrCat(kInProcessScheme, registry.next++);
    registry.servers[started.address] = started.server.get();
    started.name = InProcessName(started.address);
    return started;
  }
  if (unix_socket) {
    if (started.server == nullptr) return absl::InternalError("cannot start a gRPC server");
    const std::string path = host.substr(std::strlen(kUnixScheme));
    absl::StatusOr<std::unique_ptr<UnixListener>> listener =
        UnixListener::Start(path, started.server.get());
    if (!listener.ok()) {
      started.server->Shutdown();
      return listener.status();
    }
    started.unix_listener = *std::move(listener);
    started.address = host;
    return started;
  }
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " (is the port in use?)"));
  }
  started.address = absl::StrCat(host, ":", started.port);
  if (audience == Audience::kFleet && !FleetTlsEnabled()) {
    SY_LOG(Warning) << "serving " << started.address
                    << " over TCP without mutual TLS (--tls_ca_file, --tls_cert_file, "
                       "--tls_key_file): anyone who reaches it, any user of this host "
                       "included, can call it (docs/security.md)";
  }
  return started;
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address, Audience audience) {
  if (absl::StartsWith(address, kInProcessScheme)) {
    InProcessServers& registry = InProcess();
    absl::MutexLock lock(&registry.mutex);
    auto it = registry.servers.find(address);
    if (it != registry.servers.end()) return it->second->InProcessChannel(ChannelArgs());
    // Gone: a path where nothing listens, so calls fail as a dead peer's would.
    return grpc::CreateCustomChannel("unix:/nonexistent/switchyard-in-process-server-gone",
                                     grpc::InsecureChannelCredentials(), ChannelArgs());
  }
  grpc::ChannelArguments args = ChannelArgs();
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (audience == Audience::kFleet && !absl::StartsWith(address, kUnixScheme)) {
    FleetTls& tls = Tls();
    absl::MutexLock lock(&tls.mutex);
    if (tls.enabled) {
      grpc::SslCredentialsOptions options;
      options.pem_root_certs = tls.ca;
      options.pem_cert_chain = tls.cert;
      options.pem_private_key = tls.key;
      credentials = grpc::SslCredentials(options);
      args.SetSslTargetNameOverride(kFleetServerName);
    }
  }
  return grpc::CreateCustomChannel(address, credentials, args);
}

}  // namespace switchyard
