// ThreadSanitizer and Debian's abseil: abseil is built without TSan, so TSan cannot see
// that absl::Mutex, CondVar and Notification order memory, and every access guarded by
// one looks like a race. In the TSan build (-DSWITCHYARD_SANITIZE=thread) the linker
// sends our calls to them through these wrappers (-Wl,--wrap, CMakeLists.txt), which
// tell TSan what each call means: acquiring after a lock is taken, releasing before it
// is let go. Calls inside abseil or gRPC themselves are not wrapped (tsan.supp).
// absl::Status is the same case: its reference count drops inside abseil.

#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

// One wrapper per entry point: the real function is __real_<symbol>.
#define SY_WRAP(ret, symbol, params, args, before, after) \
  extern "C" ret __real_##symbol params;                  \
  extern "C" ret __wrap_##symbol params {                 \
    before;                                               \
    ret result = __real_##symbol args;                    \
    after;                                                \
    return result;                                        \
  }
#define SY_WRAP_VOID(symbol, params, args, before, after) \
  extern "C" void __real_##symbol params;                 \
  extern "C" void __wrap_##symbol params {                \
    before;                                               \
    __real_##symbol args;                                 \
    after;                                                \
  }

// Mutex.
SY_WRAP_VOID(_ZN4absl7debian35Mutex4LockEv, (Mutex * m), (m), , __tsan_acquire(m))
SY_WRAP_VOID(_ZN4absl7debian35Mutex10ReaderLockEv, (Mutex * m), (m), , __tsan_acquire(m))
SY_WRAP_VOID(_ZN4absl7debian35Mutex6UnlockEv, (Mutex * m), (m), __tsan_release(m), )
SY_WRAP_VOID(_ZN4absl7debian35Mutex12ReaderUnlockEv, (Mutex * m), (m), __tsan_release(m), )
SY_WRAP(bool, _ZN4absl7debian35Mutex7TryLockEv, (Mutex * m), (m), , if (result) __tsan_acquire(m))
SY_WRAP(bool, _ZN4absl7debian35Mutex13ReaderTryLockEv, (Mutex * m), (m), ,
        if (result) __tsan_acquire(m))
// Waiting lets the lock go and takes it back.
SY_WRAP_VOID(_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE, (Mutex * m, const Condition& c),
             (m, c), __tsan_release(m), __tsan_acquire(m))
SY_WRAP(bool, _ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE,
        (Mutex * m, const Condition& c, Duration d), (m, c, d), __tsan_release(m),
        __tsan_acquire(m))
SY_WRAP(bool, _ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE,
        (Mutex * m, const Condition& c, Time t), (m, c, t), __tsan_release(m), __tsan_acquire(m))
SY_WRAP_VOID(_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE, (Mutex * m, const Condition& c),
             (m, c), , __tsan_acquire(m))
SY_WRAP(bool, _ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE,
        (Mutex * m, const Condition& c, Duration d), (m, c, d), , __tsan_acquire(m))
SY_WRAP(bool, _ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE,
        (Mutex * m, const Condition& c, Time t), (m, c, t), , __tsan_acquire(m))
// CondVar: waits let the mutex go and take it back.
SY_WRAP_VOID(_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE, (CondVar * v, Mutex* m), (v, m),
             __tsan_release(m), __tsan_acquire(m))
SY_WRAP(bool, _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE,
        (CondVar * v, Mutex* m, Duration d), (v, m, d), __tsan_release(m), __tsan_acquire(m))
// Notification: what happened before Notify is seen by whoever waited for it.
SY_WRAP_VOID(_ZN4absl7debian312Notification6NotifyEv, (Notification * n), (n), __tsan_release(n), )
SY_WRAP_VOID(_ZNK4absl7debian312Notification19WaitForNotificationEv, (const Notification* n), (n), ,
             __tsan_acquire(const_cast<Notification*>(n)))
SY_WRAP(bool, _ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE,
        (const Notification* n, Duration d), (n, d), ,
        if (result) __tsan_acquire(const_cast<Notification*>(n)))
SY_WRAP(bool, _ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE,
        (const Notification* n, Time t), (n, t), ,
        if (result) __tsan_acquire(const_cast<Notification*>(n)))

// absl::Status shares one message between its copies and drops the count in abseil
// (Status::UnrefNonInlined), so TSan cannot see that the copy that frees it comes after
// every other copy let go: a holder that read the message and a holder that frees it look
// like a race. Here the count drops in our (instrumented) code; the last holder puts its
// one reference back and lets abseil free it (with one reference abseil frees at once).
extern "C" void __real__ZN4absl7debian36Status15UnrefNonInlinedEm(uintptr_t rep);
extern "C" void __wrap__ZN4absl7debian36Status15UnrefNonInlinedEm(uintptr_t rep) {
  auto* shared = reinterpret_cast<absl::status_internal::StatusRep*>(rep - 1);
  if (shared->ref.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  shared->ref.store(1, std::memory_order_relaxed);
  __real__ZN4absl7debian36Status15UnrefNonInlinedEm(rep);
}
