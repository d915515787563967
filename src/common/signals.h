#pragma once

// SIGINT/SIGTERM handling for the long-running processes: block the signals in
// every thread (call `BlockTerminationSignals` before starting any thread), then
// wait for one in the main thread and shut down in order.

namespace switchyard {

void BlockTerminationSignals();
// Returns the signal number that arrived (SIGINT or SIGTERM).
int WaitForTerminationSignal();

}  // namespace switchyard
