#include "common/element_type.h"

#include "gtest/gtest.h"

namespace switchyard {
namespace {

// Numbers as in xla_data.proto's PrimitiveType.
constexpr int kPred = 1, kS4 = 21, kS2 = 26, kF4E2M1FN = 30, kBF16 = 16, kF32 = 11, kC128 = 18,
              kToken = 17, kF8E8M0FNU = 31;

TEST(ElementTypeTest, HostBytesAreUnpackedAndDeviceBytesPacked) {
  EXPECT_EQ(HostElementBytes(kPred), 1);
  EXPECT_EQ(HostElementBytes(kBF16), 2);
  EXPECT_EQ(HostElementBytes(kF32), 4);
  EXPECT_EQ(HostElementBytes(kC128), 16);
  EXPECT_EQ(HostElementBytes(kF8E8M0FNU), 1);
  for (int sub_byte : {kS4, kS2, kF4E2M1FN}) {
    EXPECT_EQ(HostElementBytes(sub_byte), 1) << sub_byte;
  }
  EXPECT_EQ(DenseByteSize(kS4, 5), 3);
  EXPECT_EQ(DenseByteSize(kS2, 5), 2);
  EXPECT_EQ(DenseByteSize(kF32, 5), 20);
}

TEST(ElementTypeTest, TypesWithoutDataAndUnknownNumbersHaveNoSize) {
  // Callers divide by these, and refuse 0: a token or an unknown number never sizes data.
  for (int none : {0, kToken, 13, 14, -1, 32, 1 << 30}) {
    EXPECT_EQ(ElementBits(none), 0) << none;
    EXPECT_EQ(HostElementBytes(none), 0) << none;
  }
}

}  // namespace
}  // namespace switchyard
