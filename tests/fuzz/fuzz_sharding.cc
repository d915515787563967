// Shardings as clients send them (inside array and compile requests): decoded, laid out
// over shapes of every rank up to 4, and turned into XLA's tile form.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/quiet.h"
#include "proxy/sharding.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ::xla::ifrt::ShardingProto proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return -1;
  using switchyard::proxy::Sharding;
  absl::StatusOr<Sharding> sharding = switchyard::proxy::ParseSharding(proto);
  if (!sharding.ok()) return 0;
  (void)switchyard::proxy::ToTileForm(sharding->op);
  // Shapes from the input's own bytes, so that the fuzzer can steer them too.
  std::vector<int64_t> shape;
  for (size_t i = 0; i < 4 && i < size; ++i) {
    shape.push_back(data[size - 1 - i] % 17);
    (void)switchyard::proxy::LayoutShards(*sharding, shape);
  }
  (void)switchyard::proxy::ToProto(*sharding);
  return 0;
}
