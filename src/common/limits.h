#pragma once

// Every limit and period in one table, units last; each says why.

#include <cstdint>

namespace switchyard::limits {

// gRPC's 4 MiB default would cap programs and executables; arrays travel in chunks.
inline constexpr int kGrpcMessageBytesMax = 1 << 30;
// Chunk size for buffer streams: large enough to amortise per-message cost, small
// enough that no side holds much more than one chunk in flight.
inline constexpr int64_t kBufferChunkBytes = 4 << 20;
// Workers heartbeat this often; the RM declares a host unhealthy after
// kHeartbeatMissesMax periods without one (2 s: a lost host shows within 5 s).
inline constexpr int64_t kHeartbeatPeriodMs = 500;
inline constexpr int64_t kHeartbeatMissesMax = 4;
// Silence alone is not death: for this many periods past that timeout the RM asks the
// host directly, and keeps it if it answers as itself (a heartbeat delayed by a starved
// thread or a slow connection must not end a user's job). A killed host refuses the
// question and is down at once; a dark one at the window's end (3 s).
inline constexpr int64_t kHeartbeatConfirmPeriods = 2;
// Keepalive pings on every connection between Switchyard processes: a peer that
// vanishes without closing its connections is noticed within time + timeout.
inline constexpr int64_t kKeepaliveTimeMs = 10 * 1000;
inline constexpr int64_t kKeepaliveTimeoutMs = 5 * 1000;
// A worker that cannot reach the RM retries with exponential backoff up to this.
inline constexpr int64_t kRegisterBackoffMaxMs = 5000;
// `switchyard status` answers within this, trying a failed connection this many times
// this far apart: a refused RM is reported in well under a second.
inline constexpr int64_t kStatusCallMs = 5000;
inline constexpr int kStatusAttempts = 3;
inline constexpr int64_t kStatusRetryMs = 200;

// The RM's tables: a registration or request past these is refused, so no peer can
// grow the RM without bound. Sizes of real fleets are far below.
inline constexpr int64_t kSlicesMax = 1 << 16;          // slice_index < this
inline constexpr int64_t kHostsPerSliceMax = 1 << 12;   // host_index < this
inline constexpr int64_t kDevicesPerHostMax = 1 << 10;  // devices and local ordinals
inline constexpr int64_t kHostsMax = 1 << 14;           // registered hosts in all
// Global device ids are int32 on the IFRT wire.
inline constexpr int64_t kDeviceIdsMax = (int64_t{1} << 31) - 1;
inline constexpr int64_t kNameBytesMax = 1 << 10;  // addresses, host names, boot ids
inline constexpr int64_t kFleetWatchersMax = 256;  // open WatchFleet streams
// A proxy tells the RM what it holds this often (ReportProxy, for `switchyard status`);
// the RM lists a proxy until it has not heard from it for kProxyReportForgetMs (it
// stopped or cannot reach the RM), and at most kProxiesReportedMax of them (anyone who
// reaches the RM's port may report; the oldest report goes first).
inline constexpr int64_t kProxyReportPeriodMs = 2000;
inline constexpr int64_t kProxyReportForgetMs = 10 * 1000;
inline constexpr int64_t kProxiesReportedMax = 1024;
// A session whose lease is lost (taken back, idle) answers requests with the reason for
// this long, then ends, freeing what it holds for the slices' next holder.
inline constexpr int64_t kLostLeaseGraceMs = 10 * 1000;
// Leases open at once, queued or placed: each holds an RM thread (a Lease stream).
inline constexpr int64_t kLeasesMax = 256;
// Slices one lease may ask for.
inline constexpr int64_t kLeaseSlicesMax = 1 << 10;
// The bootstrap key-value store holds topologies and clique ids: small values.
inline constexpr int64_t kKvKeyBytesMax = 1 << 10;
inline constexpr int64_t kKvValueBytesMax = 4 << 20;
inline constexpr int64_t kKvKeysMax = 1 << 16;
inline constexpr int64_t kKvBytesMax = int64_t{256} << 20;
inline constexpr int64_t kKvWaitersMax = 1 << 10;           // gets waiting for a key
inline constexpr int64_t kKvGetWaitMaxMs = 10 * 60 * 1000;  // the longest a get waits
// A host down this long is no longer listed (its device ids stay reserved): an
// operator's mistyped registration does not stay in every session's device list.
inline constexpr int64_t kHostForgetAfterMs = 60 * 60 * 1000;
// After an RM restart, hosts from its state file have this long to register again
// (they do within a heartbeat period) before they count as down.
inline constexpr int64_t kRejoinGraceMs = 10 * 1000;

// How long a worker waits for a buffer id that has not appeared yet (its producer may
// still be on the way) before answering NOT_FOUND, for readers that do not name the
// operation that makes it (tools; proxies name it, and wait exactly that long).
inline constexpr int64_t kBufferWaitMs = 60 * 1000;
// A read naming an operation stream that this worker has never seen waits this long
// for the stream to open (the read may overtake it), then NOT_FOUND: the stream was
// opened on a process that is gone.
inline constexpr int64_t kStreamAppearS = 10;
// A proxy (owner) with no Dispatch stream open to a worker for this long is gone:
// the worker frees what it made.
inline constexpr int64_t kOwnerLeaseGraceMs = 3000;
// The RM lists a worker it admits a moment before the worker reads its answer (the RM
// saves its state file in between): a request for a device id that arrives then waits
// this long for the ids instead of failing.
inline constexpr int64_t kRegistrationWaitMs = 5000;
// A worker that takes no operation from its stream for this long, while a proxy waits
// to write one, is hung: its epoch ends (DATA_LOSS), as if it had died. Long, because a
// worker busy with long launches legitimately stops reading once its window is full.
inline constexpr int64_t kWorkerStallMs = 5 * 60 * 1000;
// How often the proxy looks for such writes: a small part of the limit, and rare enough
// that looking at every lane of a thousand hosts costs nothing that shows.
inline constexpr int64_t kStallCheckPeriodMs = 1000;
// Launches a worker hands to its plugin ahead of their completion. Enough to keep the
// devices busy; the rest wait in the operation stream, where a session that ends can
// still drop them (what the plugin has queued runs regardless).
inline constexpr int64_t kLaunchWindow = 32;
// Launches one session may have sent and not yet computed, over all its workers: past
// it its own request thread waits. Twice a worker's window keeps a lone session's devices
// fed; a session that floods puts at most this many launches ahead of another's call.
inline constexpr int64_t kSessionLaunchesInFlightMax = 4 * kLaunchWindow;
// A multi-host launch waits at most this long on a worker for its proxy's previous one
// to start there (worker/gang_order.h). That one is on its way in another session's
// stream, behind that session's own launches (up to kSessionLaunchesInFlightMax of
// them, each as long as a program takes), so the bound is generous; a stream that ends
// stops the wait at once.
inline constexpr int64_t kGangTurnMs = 10 * 60 * 1000;
// The RM keeps a host's gang numbers until the host reports it passed them (heartbeats):
// at most this many per host, for hosts that never report (rm/gang_numbers.h). Far more
// than a host can have waiting (its lanes' launches in flight).
inline constexpr int64_t kGangNumbersPerHostMax = 1 << 16;
// A worker waiting this long for the RM's gang number before its own asks the RM which
// of the numbers before it will never come (GangVoids), and again as often while it waits.
inline constexpr int64_t kGangGapAskMs = 1000;
// The numbers one GangVoids asks about; a worker waits for fewer than a lane's window.
inline constexpr int64_t kGangVoidsQueryMax = 4096;
// A proxy waits this long for the RM to number a multi-host launch; past it (or once
// refused) it numbers its launches itself for kGangFallbackMs, as before there was an
// RM order (ordered within the proxy, not across proxies).
inline constexpr int64_t kGangNumberTimeoutMs = 2000;
// PJRT launch ids are int32 and must not repeat among launches running on the same hosts:
// the RM gives 1 .. this, a proxy numbering its own launches the rest (up to 2^31-1).
inline constexpr uint32_t kRmLaunchIdsMax = (1u << 30) - 1;
inline constexpr int64_t kGangFallbackMs = 5000;
// A request naming a client's host buffer waits this long for its upload to begin (the
// client starts the upload before it sends the request, so it is there within moments
// unless it never comes): past it, NOT_FOUND, and the session goes on to its next request.
inline constexpr int64_t kHostBufferArrivalMs = 20 * 1000;
// Past a session's array quota (--session_max_arrays), the handles of refused requests
// still carry the refusal, up to this many more; past that they are unknown handles.
inline constexpr int64_t kRefusedHandlesMax = 4096;
// A CPU worker's buffers may take this share of the host's memory by default (its devices'
// memory is the host's): past it a request is refused, not the kernel's OOM killer left to
// pick a process. `switchyard up` divides it among the workers it starts on one host.
inline constexpr int64_t kHostBufferMemoryPercent = 80;
// `switchyard up` runs the proxy beside its workers on one machine: their defaults
// together must leave room for the processes themselves and the system, so its workers'
// buffers take this share (--buffer_memory_percent) and the proxy's staged host buffers
// this one (--proxy_max_host_buffer_bytes), a fifth of the memory left over.
inline constexpr int64_t kUpWorkerBufferMemoryPercent = 60;
inline constexpr int64_t kUpProxyHostBufferMemoryPercent = 20;
// Host buffers staged on a proxy (uploads on their way to workers, fetches on their way to
// clients) may take these shares of the memory its host gives it, by default: one
// session's, and all sessions' together. Past them a request gets RESOURCE_EXHAUSTED
// naming the bound, instead of the kernel's OOM killer picking a process. An upload's
// bytes are counted from when it begins until its array is made or it is deleted; the
// proxy's own copies in flight come on top, hence half, not most, of the memory.
inline constexpr int64_t kSessionHostBufferMemoryPercent = 25;
inline constexpr int64_t kProxyHostBufferMemoryPercent = 50;
// An upload past that bound waits this long for room before it is refused: the client's
// deletions travel on the operation stream, and may arrive just after the upload.
inline constexpr int64_t kBufferRoomWaitMs = 1000;
// An upload that one device takes whole goes on to its worker as it arrives, and the
// proxy reads the client's stream at most this far ahead of what the worker took; a
// fetch of one whole shard likewise reads the worker at most this far ahead of what
// the client took. Its memory per transfer is this window, not the transfer (an 8 GiB
// device_put held 8 GiB). Several bulk chunks, so the two hops overlap.
inline constexpr int64_t kHostBufferWindowBytes = int64_t{64} << 20;
// Until its reader comes (the request naming an upload, the client's lookup of a
// fetch), a transfer is read only this far ahead, and charged only this: a session
// serves the puts of a split array's shards one at a time while jax sends them all at
// once, so the shards waiting their turn hold this each, not a whole window.
inline constexpr int64_t kHostBufferUnreadWindowBytes = int64_t{8} << 20;
// How long an upload's stream waits for room in its window (for the request naming it
// to come, or its worker to take bytes): as long as that request waits for the bytes.
inline constexpr int64_t kUploadRoomWaitMs = 10 * 60 * 1000;
// An upload whose client sends nothing, or a fetch's lookup whose client reads nothing,
// for this long ends (--client_stall_timeout): else it holds a server thread and what it
// staged until its session ends. A client's gRPC threads read and send whatever its
// Python does, so only a stopped or wedged client waits this long.
inline constexpr int64_t kClientStallMs = 60 * 1000;
// Past two launches, the estimated device time a worker lets queue in its plugin while
// tenants compete: one whose launch arrives waits behind at most about this much of
// another's work. (A tenant alone has the whole window.)
inline constexpr int64_t kLaunchQueueMs = 10;
// On CPU, the launches a worker lets run at once while tenants compete (the CPU client
// would run any number side by side on the same cores, serving them in no fair order).
// Two, not one: with one, the device idled for a thread's wake-up between launches, and
// four clients together got 0.6x the work of one alone.
inline constexpr int64_t kHostLaunchesCompeting = 2;
// Tenants a worker keeps device time for, and the longest tenant name a launch may
// carry (a tokens file's names are at most 64): past the first, device time is added
// up under one "(other)" entry. The names come from the operator's tokens file; the
// bounds are against a faulty proxy.
inline constexpr int64_t kTenantsAccountedMax = 1024;
inline constexpr int64_t kTenantNameMax = 64;
// Finished launches a worker lists in its stats (the dashboard's recent programs).
inline constexpr int64_t kRecentLaunchesKept = 32;
// The longest a device thread waits for the client to answer a host callback (a
// debug.print takes microseconds; an io_callback loading data, seconds). The call
// fails earlier when the proxy's stream or the client goes away.
inline constexpr int64_t kHostCallbackWaitMs = 30 * 60 * 1000;
// Host callback calls waiting on one worker, and keys one client may register: the
// programs with callbacks a client compiles (each holds its functions).
inline constexpr int64_t kHostCallbacksWaitingMax = 1 << 12;
inline constexpr int64_t kHostCallbackKeysMax = 1 << 16;
// Fetches one session runs at once, on threads of its own (kept for the next one), so
// that its request loop goes on; past this, a fetch runs on the session's thread.
inline constexpr int64_t kFetchesInFlightMax = 64;
// Compiles one session runs at once off its request loop (a long compile does not hold
// up the client's other requests); past this, a compile runs on the session's thread.
inline constexpr int64_t kCompilesInFlightMax = 8;
// Live arrays one proxy session may hold by default (--session_max_arrays): far more
// than a training state has, few enough that a runaway client stops before the proxy's
// memory does.
inline constexpr int64_t kSessionArraysDefault = int64_t{1} << 20;
// Ended sessions a worker remembers, to drop their launches still on the way.
inline constexpr int64_t kCancelledSessionsKept = 4096;

// The bulk data plane (common/bulk_server.h). An offer's ticket is good this long from
// the offer to the last byte read: the puller connects at once, so a short life keeps
// a dead puller's buffer from being held. An idle peer (sending or taking nothing) ends
// its transfer after kBulkIdleS. Connections served at once: a thread each.
inline constexpr int64_t kBulkTicketS = 60;
inline constexpr int64_t kBulkIdleS = 30;
// An upload on the proxy's plane is sent as the client's bytes arrive, on one stream in
// order: the worker pulling it waits this long for the next of them, as a put over
// gRPC would (its deadline).
inline constexpr int64_t kBulkUploadIdleS = 600;
inline constexpr int64_t kBulkConnectionsMax = 64;
inline constexpr int64_t kBulkOffersMax = 4096;
// Buffers smaller than this go inline on gRPC: a connection per buffer costs more than
// its bytes (here a lone 256 KiB transfer took 5% longer on the plane, a 512 KiB one 8%
// less, and 512 KiB pulls in a batch 1.4x less). Larger ones are split into streams of
// at least kBulkStreamBytes, at most kBulkStreamsMax of them, each on its own connection
// and thread.
inline constexpr int64_t kBulkMinBytes = int64_t{512} << 10;
// A request that moves many arrays between workers (a model's weights to another
// slice) goes to each destination as batches of at most kAssembleBatchMax buffers (one
// Dispatch operation: bounds its message and how long it holds its stream), whose pulls
// run kAssembleParallel at a time: a small buffer's pull is mostly round trips, which
// overlap (1.6x for two streams of 128 KiB pulls here); each holds one buffer's bytes.
inline constexpr int64_t kAssembleBatchMax = 256;
inline constexpr int64_t kAssembleParallel = 4;
// A batch's buffers of at most kOfferedAtOnceMaxBytes are offered by their peer in one
// call (OfferBuffers) rather than a call each (most of a 512 KiB pull's time here);
// larger ones, whose call is a small part of their pull, still ask alone, so that no
// offer waits long behind the batch's other pulls (offers expire after kBulkTicketS).
inline constexpr int64_t kOfferedAtOnceMaxBytes = int64_t{16} << 20;
// A client's fetch of a buffer of at most kStreamReadMaxBytes is read over its session's
// operation stream to the worker (one more answer there) rather than by a call of its
// own, whose setup was most of a small fetch (0.4 ms of 1.1 here). A larger answer would
// hold up the stream's other answers while it is written.
inline constexpr int64_t kStreamReadMaxBytes = int64_t{256} << 10;
inline constexpr int64_t kBulkStreamBytes = int64_t{64} << 20;
inline constexpr int64_t kBulkStreamsMax = 4;
// A server copies ranges it cannot send in place through staging chunks of this size,
// kept for the next transfer (no fresh pages per transfer).
inline constexpr int64_t kBulkChunkBytes = int64_t{4} << 20;
inline constexpr int64_t kBulkStagingKept = 8;
// Freed large host buffers (HostBytes) kept for the next one of about their size:
// fresh pages cost a page clear each, the largest cost of a transfer here. At most
// this much, nor more than 1/kHostBytesKeptRamShare of RAM; the kernel may take the
// pages back under pressure.
inline constexpr int64_t kHostBytesKeptMax = int64_t{2} << 30;
inline constexpr int64_t kHostBytesKeptRamShare = 16;
// A kept one unused this long is unmapped (by the process's heap trimmer): a process
// that stopped moving data comes back to its idle RSS within a minute, while a job
// moving a batch every few seconds keeps reusing its pages.
inline constexpr int64_t kHostBytesKeptIdleMs = 30 * 1000;
// Freed shared-memory files of colocated calls kept for the same sidecar's next call
// (common/shared_memory.h): a fresh shared page cost six times a fresh private one
// here, so a call's copies into fresh files took 5x as long as into kept ones. At most
// this much per process, nor more than 1/kHostBytesKeptRamShare of RAM; unlike kept
// host buffers the kernel cannot take these pages back, so the bound is smaller.
inline constexpr int64_t kSharedFilesKeptMax = int64_t{1} << 30;
// Freed heap goes back to the system (common/heap_trim.h) once a process has been idle
// this long after letting go of something, at most this often (a trim holds malloc's
// locks for up to a few hundred ms on a large, fragmented heap), and on a worker only
// after this many buffer deletions (a few arrays free too little to be worth it) or a
// compile (measured: a 500-output program's compile left 500 MiB freed but resident).
inline constexpr int64_t kHeapTrimQuietMs = 2000;
inline constexpr int64_t kHeapTrimIntervalMinMs = 10 * 1000;
// malloc arenas the proxy may make. Each session's lanes start threads of their own, and
// glibc gives new threads arenas of their own up to 8 per core: small objects that
// outlive a session, made by those threads in the arena that held the session's arrays,
// kept up to 33 MiB of it resident after the session ended, out of malloc_trim's reach
// (test_memory_returned, one round in three). With two arenas every round came back.
inline constexpr int kProxyMallocArenas = 2;
inline constexpr int64_t kHeapTrimAfterDeletedBuffers = 1000;

// Deletions ride with the next operation to a worker; those still waiting are sent
// this often, so a client that goes quiet after dropping arrays gets them freed.
inline constexpr int64_t kDeleteFlushPeriodMs = 5;

// Arrays: XLA's shapes stay far below these; the bounds keep every product of
// client-sent dimensions (times 16-byte elements) inside int64.
inline constexpr int64_t kArrayRankMax = 64;
inline constexpr int64_t kArrayElementsMax = int64_t{1} << 44;
// The bytes a strided host array may span (its elements, 16 bytes at most each).
inline constexpr int64_t kHostRegionBytesMax = kArrayElementsMax * 16;
// Devices of one sharding, mesh or device assignment: device ids are int32 on the
// IFRT wire, and a tile assignment is materialized as a list.
inline constexpr int64_t kDevicesMax = int64_t{1} << 20;
// Outputs of a simulated host's program (common/simulated_program.h): far past what
// XLA's programs return (a train step's pytree of a few thousand arrays).
inline constexpr int64_t kExecutableOutputsMax = 1 << 16;

// Spans one process keeps while a profile is taken (about 100 bytes each): minutes of a
// busy worker; past it, spans are counted as dropped and the trace says so.
inline constexpr int64_t kTraceSpansMax = int64_t{1} << 20;

// The compilation cache's default size cap: entries are a few MB to a few hundred MB per
// program; 50 GiB keeps a team's working set on a shared volume.
inline constexpr int64_t kCompilationCacheBytesDefault = int64_t{50} << 30;

// Colocated Python. A string array's shard (held in worker memory, not on a device;
// colocated functions pass specs and small values this way): 64 MiB.
inline constexpr int64_t kStringArrayBytesMax = int64_t{64} << 20;
// A sidecar has this long to start its Python and JAX and form its processes' world.
inline constexpr int64_t kSidecarStartMs = 120'000;
// A sidecar's answer (a pickled program, outputs' shards named), at most.
inline constexpr int64_t kSidecarMessageBytesMax = int64_t{256} << 20;
// Sessions with a live sidecar on one worker; past it the least recently used stops.
inline constexpr int64_t kSidecarsMax = 16;

}  // namespace switchyard::limits
