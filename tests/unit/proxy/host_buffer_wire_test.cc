// Host-buffer messages read into and written from a HostBuffer's memory: the bytes
// protobuf's own parse and serialization would give, across slice boundaries, and
// INVALID_ARGUMENT for bytes that are not such a message.

#include "proxy/host_buffer_wire.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/host_bytes.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "ifrt/grpc_ifrt_service.pb.h"

namespace switchyard::proxy {
namespace {

namespace w = ::xla::ifrt::proxy;

// `bytes` in slices of at most `piece` bytes each, as gRPC may hand them over.
grpc::ByteBuffer InPieces(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.substr(at, piece));
  }
  if (slices.empty()) slices.emplace_back(std::string());
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::shared_ptr<HostBuffer> Space(size_t size) {
  return std::make_shared<HostBuffer>(std::make_unique<HostBytes>(size));
}

std::string Contents(const HostBuffer& buffer) {
  auto all = buffer.WaitAll(absl::InfinitePast());
  return all.ok() ? std::string(*all) : "(" + all.status().ToString() + ")";
}

TEST(HostBufferWireTest, StoreChunksLandInTheBufferAcrossSliceBoundaries) {
  std::string data(5000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  auto buffer = Space(2 * data.size());
  int64_t received = 0;
  for (size_t piece : {size_t{1}, size_t{333}}) {
    w::GrpcHostBufferStoreRequest chunk;
    chunk.set_data(data);
    grpc::ByteBuffer message = InPieces(chunk.SerializeAsString(), piece);
    ASSERT_TRUE(AppendStoreChunk(message, *buffer, &received).ok());
  }
  buffer->Finish();
  EXPECT_EQ(received, 2 * static_cast<int64_t>(data.size()));
  EXPECT_EQ(Contents(*buffer), data + data);
}

TEST(HostBufferWireTest, UnknownFieldsAndEmptyChunksAreAllowed) {
  auto buffer = Space(3);
  int64_t received = 0;
  // Field 7 (a varint), then data "abc": what a newer client's message might hold.
  std::string bytes = std::string("\x38\x05", 2) + std::string(
                                                       "\x0a\x03"
                                                       "abc",
                                                       5);
  grpc::ByteBuffer message = InPieces(bytes, 2);
  ASSERT_TRUE(AppendStoreChunk(message, *buffer, &received).ok());
  grpc::ByteBuffer empty = InPieces("", 1);
  ASSERT_TRUE(AppendStoreChunk(empty, *buffer, &received).ok());
  buffer->Finish();
  EXPECT_EQ(Contents(*buffer), "abc");
}

TEST(HostBufferWireTest, BytesThatAreNotAStoreRequestAreInvalidArguments) {
  for (const std::string& bad : {std::string("\x0a\x05"
                                             "ab",
                                             4),          // data cut short
                                 std::string("\x0a", 1),  // length missing
                                 std::string("\x0a\x01"
                                             "a\x0a\x01"
                                             "b",
                                             6),              // data twice
                                 std::string("\x00\x01", 2),  // field 0
                                 std::string("\x0f", 1)}) {   // wire type 7
    auto buffer = Space(8);
    int64_t received = 0;
    grpc::ByteBuffer message = InPieces(bad, 1);
    absl::Status status = AppendStoreChunk(message, *buffer, &received);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  }
}

TEST(HostBufferWireTest, MoreThanTheDeclaredSizeIsDataLoss) {
  auto buffer = Space(2);
  int64_t received = 0;
  w::GrpcHostBufferStoreRequest chunk;
  chunk.set_data("abc");
  grpc::ByteBuffer message = InPieces(chunk.SerializeAsString(), 64);
  EXPECT_EQ(AppendStoreChunk(message, *buffer, &received).code(), absl::StatusCode::kDataLoss);
}

TEST(HostBufferWireTest, ALookupChunkParsesAsTheResponseAndKeepsItsBuffer) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{300000}}) {
    auto buffer = Space(size);
    std::string data(size, 'q');
    if (size > 0) data[size - 1] = 'z';
    ASSERT_TRUE(buffer->Append(data).ok());
    buffer->Finish();
    const absl::string_view all = *buffer->WaitAll(absl::InfinitePast());
    grpc::ByteBuffer message = LookupChunk(buffer, 0, all);
    std::weak_ptr<HostBuffer> watch = buffer;
    buffer.reset();
    // The message keeps the buffer it points into (an empty one points nowhere).
    EXPECT_EQ(watch.expired(), size == 0) << size;
    w::GrpcHostBufferLookupResponse response;
    grpc::ProtoBufferReader reader(&message);
    ASSERT_TRUE(response.ParseFromZeroCopyStream(&reader)) << size;
    EXPECT_EQ(response.data(), data);
    message.Clear();
    EXPECT_TRUE(watch.expired()) << size;
  }
}

}  // namespace
}  // namespace switchyard::proxy
