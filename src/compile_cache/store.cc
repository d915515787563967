#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/logging.h"
#include "compile_cache/compile_cache.h"
#include "compile_cache/digest.h"
#include "switchyard/compile_cache.pb.h"

namespace switchyard::compile_cache {
namespace {

constexpr char kMagic[4] = {'S', 'Y', 'C', 'C'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kPreamble = 12;  // magic, version, header length
constexpr uint32_t kHeaderBytesMax = 1 << 20;
constexpr char kSuffix[] = ".sycc";
// A temporary this old belongs to a writer that died.
constexpr absl::Duration kStaleTemporary = absl::Hours(1);

void PutU32(std::string* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(value >> (8 * i)));
}

uint32_t GetU32(const char* bytes) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i)
    value |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return value;
}

std::string FileName(const std::string& program_digest, const std::string& key) {
  return absl::StrCat(program_digest.substr(0, 16), "-", key, kSuffix);
}

struct FileStat {
  int64_t bytes = 0;
  absl::Time modified;
};

std::optional<FileStat> Stat(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) return std::nullopt;
  return FileStat{info.st_size, absl::TimeFromTimespec(info.st_mtim)};
}

// The names in `directory` (not . or ..).
absl::StatusOr<std::vector<std::string>> Names(const std::string& directory) {
  DIR* dir = opendir(directory.c_str());
  if (dir == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot read ", directory, ": ", std::strerror(errno)));
  }
  absl::Cleanup closer = [dir] { closedir(dir); };
  std::vector<std::string> names;
  while (struct dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  return names;
}

// The header of the entry at `path`, read without its payload.
absl::StatusOr<CompileCacheEntry> ReadHeader(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  absl::Cleanup closer = [fd] { close(fd); };
  char preamble[kPreamble];
  if (pread(fd, preamble, kPreamble, 0) != static_cast<ssize_t>(kPreamble) ||
      std::memcmp(preamble, kMagic, 4) != 0 || GetU32(preamble + 4) != kFormatVersion) {
    return absl::DataLossError("not a cache entry of this format");
  }
  const uint32_t size = GetU32(preamble + 8);
  if (size > kHeaderBytesMax) return absl::DataLossError("header too large");
  std::string header(size, '\0');
  if (pread(fd, header.data(), size, kPreamble) != static_cast<ssize_t>(size)) {
    return absl::DataLossError("truncated header");
  }
  CompileCacheEntry entry;
  if (!entry.ParseFromString(header)) return absl::DataLossError("header does not parse");
  return entry;
}

// The whole entry, made into its executable in place (no second copy of what may be
// hundreds of MB): DATA_LOSS for anything but a whole, matching, intact one.
absl::Status TakePayload(std::string& bytes, const std::string& key, CompileCacheEntry* entry) {
  if (bytes.size() < kPreamble || std::memcmp(bytes.data(), kMagic, 4) != 0 ||
      GetU32(bytes.data() + 4) != kFormatVersion) {
    return absl::DataLossError("not a cache entry of this format");
  }
  const uint32_t size = GetU32(bytes.data() + 8);
  if (size > kHeaderBytesMax || bytes.size() < kPreamble + size) {
    return absl::DataLossError("truncated header");
  }
  if (!entry->ParseFromArray(bytes.data() + kPreamble, static_cast<int>(size))) {
    return absl::DataLossError("header does not parse");
  }
  if (entry->key() != key) return absl::DataLossError("the entry is for another key");
  const absl::string_view payload = absl::string_view(bytes).substr(kPreamble + size);
  if (static_cast<int64_t>(payload.size()) != entry->payload_bytes()) {
    return absl::DataLossError(absl::StrCat("the executable has ", payload.size(), " bytes of ",
                                            entry->payload_bytes(), " (truncated)"));
  }
  if (Sha256().Update(payload).Raw() != entry->payload_sha256()) {
    return absl::DataLossError("the executable's checksum does not match");
  }
  bytes.erase(0, kPreamble + size);
  return absl::OkStatus();
}

EntryInfo Info(const std::string& path, const FileStat& stat) {
  EntryInfo info;
  info.path = path;
  info.bytes = stat.bytes;
  info.last_used = stat.modified;
  absl::StatusOr<CompileCacheEntry> header = ReadHeader(path);
  if (header.ok()) {
    info.key = header->key();
    info.program_name = header->program_name();
    info.plugin_description = header->plugin_description();
    info.devices_description = header->devices_description();
    info.compile_seconds = header->compile_seconds();
    info.created = absl::FromUnixMillis(header->created_unix_ms());
  } else {
    info.program_name = absl::StrCat("(unreadable: ", header.status().message(), ")");
  }
  return info;
}

// Entries oldest use first, and their total size.
absl::StatusOr<std::vector<EntryInfo>> Entries(const std::string& directory, bool headers) {
  absl::StatusOr<std::vector<std::string>> names = Names(directory);
  if (!names.ok()) return names.status();
  std::vector<EntryInfo> entries;
  for (const std::string& name : *names) {
    if (!absl::EndsWith(name, kSuffix)) continue;
    const std::string path = absl::StrCat(directory, "/", name);
    std::optional<FileStat> stat = Stat(path);
    if (!stat.has_value()) continue;  // removed meanwhile
    if (headers) {
      entries.push_back(Info(path, *stat));
    } else {
      entries.push_back(EntryInfo{.path = path, .bytes = stat->bytes, .last_used = stat->modified});
    }
  }
  std::sort(entries.begin(), entries.end(),
            [](const EntryInfo& a, const EntryInfo& b) { return a.last_used < b.last_used; });
  return entries;
}

// Removes the least recently used entries beyond `max_bytes`, never `keep`.
std::vector<EntryInfo> Evict(std::vector<EntryInfo> entries, int64_t max_bytes,
                             const std::string& keep) {
  int64_t total = 0;
  for (const EntryInfo& entry : entries) total += entry.bytes;
  std::vector<EntryInfo> removed;
  for (const EntryInfo& entry : entries) {
    if (total <= max_bytes) break;
    if (entry.path == keep) continue;
    if (unlink(entry.path.c_str()) == 0 || errno == ENOENT) {
      total -= entry.bytes;
      removed.push_back(entry);
    }
  }
  return removed;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CompileCache>> CompileCache::Open(const std::string& directory,
                                                                 int64_t max_bytes) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (!std::filesystem::is_directory(directory, error)) {
    return absl::UnavailableError(absl::StrCat("cannot create the compilation cache directory ",
                                               directory, ": ",
                                               error ? error.message() : "not a directory"));
  }
  if (absl::StatusOr<std::vector<std::string>> names = Names(directory); !names.ok()) {
    return names.status();
  }
  // Whether stores will work: a read-only mount still serves hits.
  const std::string probe = absl::StrCat(directory, "/.probe");
  const bool writable = WriteFileAtomically(probe, "").ok();
  unlink(probe.c_str());
  return std::unique_ptr<CompileCache>(new CompileCache(directory, max_bytes, writable));
}

std::string CompileCache::PathOf(const Key& key) const {
  return absl::StrCat(directory_, "/", FileName(key.program_digest, key.id));
}

std::optional<Hit> CompileCache::Lookup(const Key& key) {
  const std::string path = PathOf(key);
  absl::StatusOr<std::string> bytes = ReadWholeFile(path);
  if (!bytes.ok()) {
    if (!absl::IsNotFound(bytes.status())) {
      SY_LOG(Warning) << "compilation cache: " << bytes.status().message();
    }
    ++misses_;
    ExplainMiss(key);
    return std::nullopt;
  }
  CompileCacheEntry entry;
  const int64_t size = static_cast<int64_t>(bytes->size());
  if (absl::Status intact = TakePayload(*bytes, key.id, &entry); !intact.ok()) {
    SY_LOG(Warning) << "compilation cache: ignoring and removing " << path << ": "
                    << intact.message();
    unlink(path.c_str());
    ++corrupt_;
    ++misses_;
    return std::nullopt;
  }
  utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // used now: last to be evicted
  ++hits_;
  bytes_read_ += size;
  return Hit{*std::move(bytes), entry.compile_seconds()};
}

void CompileCache::ExplainMiss(const Key& key) const {
  absl::StatusOr<std::vector<std::string>> names = Names(directory_);
  if (!names.ok()) return;
  const std::string prefix = absl::StrCat(key.program_digest.substr(0, 16), "-");
  std::vector<std::string> reasons;
  for (const std::string& name : *names) {
    if (!absl::StartsWith(name, prefix) || !absl::EndsWith(name, kSuffix)) continue;
    absl::StatusOr<CompileCacheEntry> other = ReadHeader(absl::StrCat(directory_, "/", name));
    if (!other.ok() || other->program_digest() != key.program_digest) continue;
    std::vector<std::string> parts;
    if (other->plugin_digest() != key.plugin_digest) {
      parts.push_back(absl::StrCat(
          "the plugin (cached for ", other->plugin_description(), "; this worker has ",
          key.plugin_description,
          other->plugin_description() == key.plugin_description ? ", another build" : "", ")"));
    }
    if (other->options_digest() != key.options_digest) parts.push_back("the compile options");
    if (other->devices_digest() != key.devices_digest) {
      parts.push_back(absl::StrCat("the device assignment (cached for ",
                                   other->devices_description(), "; now ", key.devices_description,
                                   ")"));
    }
    if (!parts.empty()) reasons.push_back(absl::StrJoin(parts, ", "));
    if (reasons.size() >= 3) break;
  }
  if (reasons.empty()) return;  // a program not seen before
  SY_LOG(Info) << "compilation cache miss for "
               << (key.program_name.empty()
                       ? absl::StrCat("program ", key.program_digest.substr(0, 12))
                       : key.program_name)
               << ": entries for this program differ in " << absl::StrJoin(reasons, "; or in ");
}

void CompileCache::Store(const Key& key, absl::string_view executable, double compile_seconds) {
  if (!writable_) return;
  CompileCacheEntry entry;
  entry.set_key(key.id);
  entry.set_program_digest(key.program_digest);
  entry.set_options_digest(key.options_digest);
  entry.set_devices_digest(key.devices_digest);
  entry.set_plugin_digest(key.plugin_digest);
  entry.set_plugin_description(key.plugin_description);
  entry.set_devices_description(key.devices_description);
  entry.set_program_name(key.program_name);
  entry.set_payload_bytes(static_cast<int64_t>(executable.size()));
  entry.set_payload_sha256(Sha256().Update(executable).Raw());
  entry.set_compile_seconds(compile_seconds);
  entry.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  const std::string header = entry.SerializeAsString();
  std::string bytes(kMagic, 4);
  PutU32(&bytes, kFormatVersion);
  PutU32(&bytes, static_cast<uint32_t>(header.size()));
  bytes.reserve(bytes.size() + header.size() + executable.size());
  bytes.append(header);
  bytes.append(executable.data(), executable.size());
  const std::string path = PathOf(key);
  absl::Status written = WriteFileAtomically(path, bytes);
  if (!written.ok()) {
    ++store_failures_;
    SY_LOG(Warning) << "compilation cache: cannot store " << key.program_name << ": "
                    << written.message();
    return;
  }
  ++stores_;
  bytes_written_ += static_cast<int64_t>(bytes.size());
  if (max_bytes_ <= 0) return;
  absl::StatusOr<std::vector<EntryInfo>> entries = Entries(directory_, /*headers=*/false);
  if (!entries.ok()) return;
  for (const EntryInfo& removed : Evict(*std::move(entries), max_bytes_, path)) {
    ++evictions_;
    SY_LOG(Info) << "compilation cache: evicted " << removed.path << " (" << removed.bytes
                 << " bytes; the cache holds at most " << max_bytes_ << ")";
  }
}

void CompileCache::Reject(const Key& key, absl::string_view why) {
  SY_LOG(Warning) << "compilation cache: the plugin would not load the entry for "
                  << key.program_name << " (" << why << "); compiling it again";
  unlink(PathOf(key).c_str());
  --hits_;
  ++misses_;
  ++corrupt_;
}

void CompileCache::AddLoadSeconds(double seconds, double compile_seconds) {
  load_micros_ += static_cast<int64_t>(seconds * 1e6);
  saved_micros_ += static_cast<int64_t>(std::max(0.0, compile_seconds - seconds) * 1e6);
}

Counters CompileCache::counters() const {
  Counters counters;
  counters.hits = hits_;
  counters.misses = misses_;
  counters.stores = stores_;
  counters.store_failures = store_failures_;
  counters.corrupt = corrupt_;
  counters.evictions = evictions_;
  counters.bytes_read = bytes_read_;
  counters.bytes_written = bytes_written_;
  counters.load_seconds = static_cast<double>(load_micros_) / 1e6;
  counters.compile_seconds_saved = static_cast<double>(saved_micros_) / 1e6;
  return counters;
}

absl::StatusOr<std::vector<EntryInfo>> ListEntries(const std::string& directory) {
  return Entries(directory, /*headers=*/true);
}

absl::StatusOr<std::vector<EntryInfo>> Prune(const std::string& directory, int64_t max_bytes) {
  absl::StatusOr<std::vector<std::string>> names = Names(directory);
  if (!names.ok()) return names.status();
  std::vector<EntryInfo> removed;
  for (const std::string& name : *names) {
    if (!absl::StrContains(name, ".tmp.")) continue;
    const std::string path = absl::StrCat(directory, "/", name);
    std::optional<FileStat> stat = Stat(path);
    if (stat.has_value() && absl::Now() - stat->modified > kStaleTemporary &&
        unlink(path.c_str()) == 0) {
      removed.push_back(EntryInfo{.path = path, .bytes = stat->bytes, .last_used = stat->modified});
    }
  }
  absl::StatusOr<std::vector<EntryInfo>> entries = Entries(directory, /*headers=*/true);
  if (!entries.ok()) return entries.status();
  for (EntryInfo& entry : Evict(*std::move(entries), std::max<int64_t>(max_bytes, 0), "")) {
    removed.push_back(std::move(entry));
  }
  return removed;
}

}  // namespace switchyard::compile_cache
