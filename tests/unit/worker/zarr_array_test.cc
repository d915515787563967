#include "worker/zarr_array.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "gtest/gtest.h"

namespace switchyard::worker {
namespace {

// Each test's own directory, removed after it.
class ZarrArrayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = absl::StrCat(::testing::TempDir(), "/zarr_XXXXXX");
    ASSERT_NE(mkdtemp(dir.data()), nullptr);
    root_ = dir;
  }
  void TearDown() override {
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }
  std::string root_;
};

// 0, 1, 2, ... as int32.
std::vector<int32_t> Iota(int64_t n, int32_t from = 0) {
  std::vector<int32_t> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = from + static_cast<int32_t>(i);
  return values;
}

absl::string_view Bytes(const std::vector<int32_t>& values) {
  return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int32_t)};
}

// The rows [r0, r1) x columns [c0, c1) of a row-major 6x5 array of Iota(30).
std::vector<int32_t> Box(int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  std::vector<int32_t> out;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) out.push_back(static_cast<int32_t>(r * 5 + c));
  }
  return out;
}

TEST_F(ZarrArrayTest, MetadataRoundTrips) {
  ZarrArray array{BF16, {8, 4}, {4, 4}};
  auto text = ZarrMetadata(array);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(text->find("\"dtype\":\"bfloat16\""), std::string::npos);
  auto parsed = ParseZarrMetadata(*text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->dtype, BF16);
  EXPECT_EQ(parsed->shape, array.shape);
  EXPECT_EQ(parsed->chunks, array.chunks);
}

TEST_F(ZarrArrayTest, ParsesWhatOtherWritersWrite) {
  auto parsed = ParseZarrMetadata(
      R"({"chunks":[2],"compressor":null,"dtype":"<i8","fill_value":0,"filters":null,)"
      R"("order":"C","shape":[3],"zarr_format":2})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->dtype, S64);
}

TEST_F(ZarrArrayTest, RefusesWhatItCannotDecode) {
  EXPECT_TRUE(absl::IsUnimplemented(
      ParseZarrMetadata(R"({"zarr_format":2,"shape":[4],"chunks":[4],"dtype":"<f4",)"
                        R"("compressor":{"id":"zstd"}})")
          .status()));
  EXPECT_TRUE(absl::IsUnimplemented(
      ParseZarrMetadata(R"({"zarr_format":2,"shape":[4],"chunks":[4],"dtype":">f4"})").status()));
  EXPECT_TRUE(absl::IsUnimplemented(
      ParseZarrMetadata(R"({"zarr_format":2,"shape":[4],"chunks":[4],"dtype":"<f4","order":"F"})")
          .status()));
  EXPECT_FALSE(
      ParseZarrMetadata(R"({"zarr_format":2,"shape":[4],"chunks":[0],"dtype":"<f4"})").ok());
  EXPECT_FALSE(
      ParseZarrMetadata(R"({"zarr_format":2,"shape":[-4],"chunks":[1],"dtype":"<f4"})").ok());
  EXPECT_FALSE(ParseZarrMetadata("not json").ok());
  EXPECT_FALSE(ZarrDType(S4).ok());
}

// A 6x5 array in 4x3 chunks (edge chunks are partial), read back in other boxes.
TEST_F(ZarrArrayTest, ShardsWrittenAsChunksReadBackInAnyBox) {
  const std::string dir = root_ + "/w";
  const ZarrArray array{S32, {6, 5}, {4, 3}};
  ASSERT_TRUE(WriteZarrMetadata(dir, array).ok());
  for (int64_t r : {0, 4}) {
    for (int64_t c : {0, 3}) {
      const int64_t rows = std::min<int64_t>(4, 6 - r), cols = std::min<int64_t>(3, 5 - c);
      const auto shard = Box(r, r + rows, c, c + cols);
      ASSERT_TRUE(WriteChunk(dir, array, {r, c}, {rows, cols}, Bytes(shard)).ok());
    }
  }
  // Edge chunks are stored whole.
  auto edge = ReadWholeFile(dir + "/1.1");
  ASSERT_TRUE(edge.ok());
  EXPECT_EQ(edge->size(), 4u * 3 * sizeof(int32_t));

  for (auto [r0, r1, c0, c1] : std::vector<std::array<int64_t, 4>>{
           {0, 6, 0, 5}, {1, 5, 2, 4}, {5, 6, 4, 5}, {0, 3, 0, 5}, {3, 6, 0, 5}}) {
    std::vector<int32_t> out((r1 - r0) * (c1 - c0), -1);
    absl::Span<char> span(reinterpret_cast<char*>(out.data()), out.size() * sizeof(int32_t));
    ASSERT_TRUE(ReadBox(dir, S32, {6, 5}, {r0, c0}, {r1 - r0, c1 - c0}, span).ok());
    EXPECT_EQ(out, Box(r0, r1, c0, c1)) << r0 << ":" << r1 << "," << c0 << ":" << c1;
  }
}

TEST_F(ZarrArrayTest, AScalar) {
  const std::string dir = root_ + "/s";
  const ZarrArray array{S32, {}, {}};
  ASSERT_TRUE(WriteZarrMetadata(dir, array).ok());
  const std::vector<int32_t> value{42};
  ASSERT_TRUE(WriteChunk(dir, array, {}, {}, Bytes(value)).ok());
  EXPECT_TRUE(ReadWholeFile(dir + "/0").ok());
  int32_t out = 0;
  ASSERT_TRUE(
      ReadBox(dir, S32, {}, {}, {}, absl::Span<char>(reinterpret_cast<char*>(&out), 4)).ok());
  EXPECT_EQ(out, 42);
}

TEST_F(ZarrArrayTest, AMissingChunkReadsAsZeros) {
  const std::string dir = root_ + "/m";
  ASSERT_TRUE(WriteZarrMetadata(dir, {S32, {4}, {2}}).ok());
  const std::vector<int32_t> first{7, 8};
  ASSERT_TRUE(WriteChunk(dir, {S32, {4}, {2}}, {0}, {2}, Bytes(first)).ok());
  std::vector<int32_t> out(4, -1);
  ASSERT_TRUE(
      ReadBox(dir, S32, {4}, {0}, {4}, absl::Span<char>(reinterpret_cast<char*>(out.data()), 16))
          .ok());
  EXPECT_EQ(out, (std::vector<int32_t>{7, 8, 0, 0}));
}

TEST_F(ZarrArrayTest, ReadsAreChecked) {
  const std::string dir = root_ + "/c";
  ASSERT_TRUE(WriteZarrMetadata(dir, {S32, {4}, {2}}).ok());
  std::vector<int32_t> out(4);
  absl::Span<char> span(reinterpret_cast<char*>(out.data()), 16);
  auto status = ReadBox(dir, F32, {4}, {0}, {4}, span);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_NE(status.message().find("S32[4]"), absl::string_view::npos) << status;
  EXPECT_TRUE(absl::IsFailedPrecondition(ReadBox(dir, S32, {5}, {0}, {4}, span)));
  EXPECT_TRUE(absl::IsNotFound(ReadBox(dir + "/nothing", S32, {4}, {0}, {4}, span)));
  EXPECT_FALSE(ReadBox(dir, S32, {4}, {2}, {4}, span).ok());  // outside the array
  // A damaged chunk.
  ASSERT_TRUE(WriteFileAtomically(dir + "/1", "abc").ok());
  EXPECT_TRUE(absl::IsDataLoss(ReadBox(dir, S32, {4}, {0}, {4}, span)));
}

TEST_F(ZarrArrayTest, AShardThatIsNotAChunkIsRefused) {
  const std::string dir = root_ + "/n";
  const std::vector<int32_t> values = Iota(2);
  EXPECT_FALSE(WriteChunk(dir, {S32, {4}, {2}}, {1}, {2}, Bytes(values)).ok());
  EXPECT_FALSE(WriteChunk(dir, {S32, {4}, {2}}, {0}, {1}, Bytes(values)).ok());
  EXPECT_FALSE(WriteChunk(dir, {S32, {4}, {2}}, {4}, {2}, Bytes(values)).ok());
}

}  // namespace
}  // namespace switchyard::worker
