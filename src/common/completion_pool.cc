#include "common/completion_pool.h"

#include <string>

#include "common/thread_name.h"

#if defined(__SANITIZE_THREAD__)
#define SY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SY_TSAN 1
#endif
#endif
#ifdef SY_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace switchyard {
namespace {

void Released(void* tag) {
#ifdef SY_TSAN
  __tsan_release(tag);
#endif
}

void Acquired(void* tag) {
#ifdef SY_TSAN
  __tsan_acquire(tag);
#endif
}

}  // namespace

CompletionPool::CompletionPool(size_t threads, const char* thread_name) {
  if (threads == 0) threads = 1;
  for (size_t i = 0; i < threads; ++i) queues_.push_back(std::make_unique<grpc::CompletionQueue>());
  for (size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([queue = queues_[i].get(), name = std::string(thread_name)] {
      NameThisThread(name);
      void* tag = nullptr;
      bool ok = false;
      // False once shut down and drained.
      while (queue->Next(&tag, &ok)) {
        Acquired(tag);
        static_cast<Tag*>(tag)->Completed(ok);
      }
    });
  }
}

CompletionPool::~CompletionPool() {
  for (const auto& queue : queues_) queue->Shutdown();
  for (std::thread& thread : threads_) thread.join();
}

void* CompletionPool::Arm(Tag* tag) {
  Released(tag);
  return tag;
}

grpc::CompletionQueue* CompletionPool::Pick() {
  return queues_[next_.fetch_add(1, std::memory_order_relaxed) % queues_.size()].get();
}

}  // namespace switchyard
