#include "common/huge_pages.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/ascii.h"

namespace switchyard {
namespace {

constexpr char kBalloonDeviceId[] = "0x0005";
constexpr size_t kFeatureReporting = 5;  // VIRTIO_BALLOON_F_REPORTING

std::string FirstLine(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(absl::StripAsciiWhitespace(line));
}

}  // namespace

HugePagePolicy ChooseHugePages(const char* setting, bool free_page_reporting) {
  const std::string value = setting == nullptr ? "" : setting;
  if (value == "1") return {true, "huge pages (SWITCHYARD_HUGE_PAGES=1)"};
  if (value == "0") return {false, "4 KiB pages (SWITCHYARD_HUGE_PAGES=0)"};
  if (free_page_reporting) {
    return {false,
            "4 KiB pages: the hypervisor takes back free memory (virtio balloon with free page "
            "reporting), so a fresh huge page costs it a 2 MiB fault; SWITCHYARD_HUGE_PAGES=1 "
            "overrides"};
  }
  return {true, "huge pages"};
}

bool FreePageReporting(const std::string& virtio_devices) {
  std::error_code error;
  for (const auto& device : std::filesystem::directory_iterator(virtio_devices, error)) {
    if (FirstLine(device.path() / "device") != kBalloonDeviceId) continue;
    if (!std::filesystem::exists(device.path() / "driver", error)) continue;
    const std::string features = FirstLine(device.path() / "features");
    if (features.size() > kFeatureReporting && features[kFeatureReporting] == '1') return true;
  }
  return false;
}

const HugePagePolicy& HostHugePages() {
  static const HugePagePolicy* policy = new HugePagePolicy(ChooseHugePages(
      std::getenv("SWITCHYARD_HUGE_PAGES"), FreePageReporting("/sys/bus/virtio/devices")));
  return *policy;
}

}  // namespace switchyard
