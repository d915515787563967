#pragma once

// A fixed pool of threads, each draining a gRPC CompletionQueue of its own: streams
// driven by gRPC's async API (proxy/lane_stream.h) are bound to one of the queues, and
// their operations' completions run on its thread. However many streams there are, the
// threads are the pool's. Completions must not block: they hold up every stream of
// their queue. Thread-safe.
//
// Not gRPC's callback API: Debian's gRPC 1.51 runs client callbacks on threads of its
// own that outlive the channels (docs/scale.md); these threads are joined here.

#include <atomic>
#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include "grpcpp/completion_queue.h"

namespace switchyard {

class CompletionPool {
 public:
  // What an operation's tag points at: `Completed` runs on the queue's thread once the
  // operation is done (`ok`: as gRPC's CompletionQueue::Next says).
  class Tag {
   public:
    virtual void Completed(bool ok) = 0;

   protected:
    ~Tag() = default;
  };

  // `threads` at least 1; `thread_name` names them (common/thread_name.h).
  CompletionPool(size_t threads, const char* thread_name);
  // Shuts the queues down and joins their threads once every operation has completed:
  // every call bound to a queue must have ended (or be cancelled) by then.
  ~CompletionPool();
  CompletionPool(const CompletionPool&) = delete;
  CompletionPool& operator=(const CompletionPool&) = delete;

  // Every tag handed to gRPC goes through here: what this thread wrote before is then
  // seen by the thread that completes it. (The handoff is gRPC's, which ThreadSanitizer
  // does not see; this tells it.)
  static void* Arm(Tag* tag);

  // A queue to bind a new call to, in turn.
  grpc::CompletionQueue* Pick();
  size_t size() const { return queues_.size(); }

 private:
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  std::atomic<size_t> next_{0};
};

}  // namespace switchyard
