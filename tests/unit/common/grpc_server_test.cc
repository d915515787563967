#include "common/grpc_server.h"

#include "gtest/gtest.h"

namespace switchyard {
namespace {

TEST(GrpcServerTest, PeerIdentityOfTcpPeersDropsThePort) {
  EXPECT_EQ(PeerIdentity("ipv4:10.0.0.5:4242"), "ipv4:10.0.0.5");
  EXPECT_EQ(PeerIdentity("ipv6:[::1]:4242"), "ipv6:[::1]");
  EXPECT_EQ(PeerIdentity("ipv6:[fe80::1%eth0]:80"), "ipv6:[fe80::1%eth0]");
  EXPECT_EQ(PeerIdentity("inproc"), "inproc");
  EXPECT_EQ(PeerIdentity("ipv4:"), "ipv4:");
  // A descriptor no UnixListener accepted names no process.
  EXPECT_EQ(PeerIdentity("fd:987654"), "fd:987654");
}

TEST(GrpcServerTest, FleetTlsRefusesFilesThatAreNotPem) {
  absl::Status missing = UseFleetTls("/nonexistent/ca.pem", "/nonexistent/c.pem", "/x.key");
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.message().find("--tls_ca_file=/nonexistent/ca.pem"), std::string::npos);
  EXPECT_FALSE(FleetTlsEnabled());
}

}  // namespace
}  // namespace switchyard
