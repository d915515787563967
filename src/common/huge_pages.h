#pragma once

// Whether large host buffers (HostBytes) ask the kernel for transparent huge pages.
//
// Usually they should: a fresh 2 MiB page is one fault instead of 512, and copies
// through it miss the TLB less. Not on a virtual machine whose hypervisor takes back
// the guest's free memory (a virtio balloon with free page reporting): the free blocks
// a huge page is made of are exactly the ones reported, so each fresh huge page costs
// the host a 2 MiB fault. Measured on such a machine: filling fresh memory after a few
// idle seconds, 330-420 MB/s with huge pages against 2.2-2.8 GB/s without; back to
// back, huge pages 2x faster, and transfers through reused memory 1.1-1.4x faster with
// them (docs/performance.md has the table). The cold loss is the larger, and falls on
// restores and first steps, so such machines get 4 KiB pages.

#include <string>

namespace switchyard {

struct HugePagePolicy {
  bool use = true;
  std::string why;  // for the log
};

// The choice, from SWITCHYARD_HUGE_PAGES's value (`setting`: "1" or "0" decides; null
// or anything else: automatic) and whether the machine reports free pages to its
// hypervisor. Pure.
HugePagePolicy ChooseHugePages(const char* setting, bool free_page_reporting);

// Whether a virtio balloon under `virtio_devices` (sysfs: /sys/bus/virtio/devices) has
// free page reporting: device id 5, feature bit 5 (VIRTIO_BALLOON_F_REPORTING) of its
// `features`, bound to a driver. False when the directory is missing or unreadable.
bool FreePageReporting(const std::string& virtio_devices);

// This process's choice, made once from the environment and /sys.
const HugePagePolicy& HostHugePages();

}  // namespace switchyard
