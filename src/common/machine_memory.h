#pragma once

// How much memory this process's host lets it use, for bounds derived from the machine
// (a worker's buffers, a proxy's staged host buffers): the machine's physical memory,
// or its control group's limit where lower (a container on Kubernetes sees the node's
// memory in /proc, and is killed at its own limit). And how much it uses.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace switchyard {

// The host's physical memory in bytes; 0 when the system does not say.
int64_t PhysicalMemoryBytes();
// The lower of the physical memory and this process's cgroup limit (v2 memory.max, or
// v1 memory.limit_in_bytes, the lowest on the way from its own cgroup up to the root:
// systemd's MemoryMax= sits on a service's cgroup, a pod's on the container's); 0 when
// neither says.
int64_t MemoryLimitBytes();
// This process's resident memory in bytes; 0 when the system does not say.
int64_t ResidentBytes();
// A cgroup limit file's contents: the limit in bytes, or none for "max" (v2), a value
// past any machine (v1's "no limit" is about 2^63), or text that is not a number.
std::optional<int64_t> ParseCgroupMemoryLimit(absl::string_view text);
// The lowest memory limit from the cgroup that `proc_self_cgroup` (the text of
// /proc/self/cgroup) names up to the root of /sys/fs/cgroup, reading each limit file
// with `read` (a path's contents, or none); none if no file on the way sets one.
std::optional<int64_t> CgroupMemoryLimit(
    absl::string_view proc_self_cgroup,
    const std::function<std::optional<std::string>(const std::string& path)>& read);

}  // namespace switchyard
