#pragma once

// Bytes of buffer contents copied by this process: a memcpy, protobuf's parse or
// serialization of a message's bytes field, a PJRT read of a device buffer into host
// memory, and the kernel's copy of each byte this process sends or receives on a socket
// (the kernel's own accounting, /proc/<pid>/io, misses send/recvmsg). The bench divides
// the sum over the servers by the bytes moved: copies per byte on each path
// (docs/performance.md). Count where a payload is copied, once per copy. Counted on the
// transfer paths (gRPC and the data plane); file I/O (colocated hand-off, checkpoints) is
// not yet.

#include <cstddef>
#include <cstdint>

namespace switchyard {

// Adds `bytes` copied `times` times. Lock-free; safe from any thread.
void CountCopied(size_t bytes, int times = 1);

// The total so far, for the process's metrics.
uint64_t BytesCopied();

}  // namespace switchyard
