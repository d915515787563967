#include "common/copy_count.h"

#include <atomic>

namespace switchyard {
namespace {

std::atomic<uint64_t> copied{0};

}  // namespace

void CountCopied(size_t bytes, int times) {
  copied.fetch_add(static_cast<uint64_t>(bytes) * times, std::memory_order_relaxed);
}

uint64_t BytesCopied() { return copied.load(std::memory_order_relaxed); }

}  // namespace switchyard
