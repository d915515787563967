// Memory a less trusted process fills and this one takes back without a copy: the
// other process (played here by a second mapping of the same descriptor) can write it
// but not shrink or grow it, each part maps on its own, a part freed while others live
// gives its pages back, and a pool serves freed files again within its bound.

#include "common/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "gtest/gtest.h"

namespace switchyard {
namespace {

int64_t AllocatedBytes(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? int64_t{st.st_blocks} * 512 : -1;
}

TEST(SharedMemoryFileTest, PartsStartOnPages) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  EXPECT_EQ(SharedMemoryFile::PartStart(0), 0);
  EXPECT_EQ(SharedMemoryFile::PartStart(1), page);
  EXPECT_EQ(SharedMemoryFile::PartStart(page), page);
  EXPECT_EQ(SharedMemoryFile::PartStart(page + 1), 2 * page);
}

TEST(SharedMemoryFileTest, TheOtherSideWritesButCannotResizeAndEachPartIsItsOwn) {
  const int64_t first = 3 << 20, second = 5;  // odd sizes, each on its own pages
  const int64_t second_at = SharedMemoryFile::PartStart(first);
  auto file = SharedMemoryFile::Create("shared-memory-test",
                                       SharedMemoryFile::PartStart(second_at + second));
  ASSERT_TRUE(file.ok()) << file.status();
  const int fd = (*file)->fd();

  // The other process: its own descriptor and mapping, writable, not resizable.
  const int theirs = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  ASSERT_GE(theirs, 0);
  char* mapped = static_cast<char*>(
      mmap(nullptr, (*file)->size(), PROT_READ | PROT_WRITE, MAP_SHARED, theirs, 0));
  ASSERT_NE(mapped, MAP_FAILED);
  std::memset(mapped, 'a', first);
  std::memcpy(mapped + second_at, "hello", second);
  EXPECT_NE(ftruncate(theirs, 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate(theirs, (*file)->size() * 2), 0);
  EXPECT_NE(fcntl(theirs, F_ADD_SEALS, F_SEAL_WRITE), 0);  // no seals past the worker's
  munmap(mapped, (*file)->size());

  auto a = (*file)->MapPart(0, first);
  auto b = (*file)->MapPart(second_at, second);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->size(), static_cast<size_t>(first));
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*a)->data()) % HostBytes::kAlignment, 0u);
  EXPECT_EQ(std::string((*a)->data() + first - 3, 3), "aaa");
  EXPECT_EQ(std::string((*b)->data(), second), "hello");
  (*a)->data()[0] = 'z';  // a device buffer may be written in place (donation)

  const int64_t before = AllocatedBytes(theirs);
  a->reset();  // its pages go back; the other part stays
  EXPECT_LE(AllocatedBytes(theirs), before - first);
  EXPECT_EQ(std::string((*b)->data(), second), "hello");
  close(theirs);
}

TEST(SharedMemoryFileTest, PartsOutsideTheFileOrOffAPageAreRefused) {
  auto file = SharedMemoryFile::Create("shared-memory-test", 2 * sysconf(_SC_PAGESIZE));
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->MapPart(1, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*file)->MapPart(0, (*file)->size() + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*file)->MapPart(-4096, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*file)->MapPart((*file)->size(), INT64_MAX).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto empty = (*file)->MapPart((*file)->size(), 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->size(), 0u);
  EXPECT_EQ(SharedMemoryFile::Create("shared-memory-test", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SharedMemoryFileTest, APartOutlivesTheFileObject) {
  std::unique_ptr<HostBytes> part;
  {
    auto file = SharedMemoryFile::Create("shared-memory-test", 4096);
    ASSERT_TRUE(file.ok());
    auto mapped = (*file)->MapPart(0, 10);
    ASSERT_TRUE(mapped.ok());
    part = *std::move(mapped);
    std::memcpy(part->data(), "0123456789", 10);
  }
  EXPECT_EQ(std::string(part->data(), 10), "0123456789");
}

TEST(SharedMemoryPoolTest, AFreedFileServesTheNextOfUpToHalfItsSizeWithItsPages) {
  SharedMemoryPool pool("shared-memory-test");
  const int64_t size = 1 << 20;
  int64_t kept_before = SharedMemoryPool::KeptBytesInProcess();
  ino_t first_file = 0;
  {
    auto file = pool.Take(size);
    ASSERT_TRUE(file.ok()) << file.status();
    struct stat st;
    ASSERT_EQ(fstat((*file)->fd(), &st), 0);
    first_file = st.st_ino;
    auto part = (*file)->MapPart(0, size);
    ASSERT_TRUE(part.ok());
    std::memset((*part)->data(), 'k', size);
  }  // the part (the last) and the file: kept, pages and all
  EXPECT_EQ(pool.kept_bytes(), size);
  EXPECT_EQ(SharedMemoryPool::KeptBytesInProcess(), kept_before + size);

  EXPECT_EQ(pool.Take(size * 2 + 4096).value()->size(), size * 2 + 4096);  // too small: new
  auto again = pool.Take(size / 2);
  ASSERT_TRUE(again.ok());
  struct stat st;
  ASSERT_EQ(fstat((*again)->fd(), &st), 0);
  EXPECT_EQ(st.st_ino, first_file);
  EXPECT_EQ(st.st_blocks * 512, size);  // its pages are there
  EXPECT_EQ((*again)->size(), size);
  EXPECT_EQ(pool.kept_bytes(), size * 2 + 4096);            // the new one came back meanwhile
  EXPECT_EQ(pool.Take(size / 8).value()->fd() >= 0, true);  // past twice: a new one
}

TEST(SharedMemoryPoolTest, FilesInUseWhenThePoolGoesCloseWithTheirLastHolder) {
  std::unique_ptr<HostBytes> part;
  const int64_t kept_before = SharedMemoryPool::KeptBytesInProcess();
  {
    SharedMemoryPool pool("shared-memory-test");
    auto file = pool.Take(4096);
    ASSERT_TRUE(file.ok());
    part = (*file)->MapPart(0, 5).value();
    std::memcpy(part->data(), "still", 5);
  }
  EXPECT_EQ(std::string(part->data(), 5), "still");
  part.reset();
  EXPECT_EQ(SharedMemoryPool::KeptBytesInProcess(), kept_before);
}

}  // namespace
}  // namespace switchyard
