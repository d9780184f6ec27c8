// The CPU thread teams of OpenMP (libgomp), and handing them back when a thread goes idle.
//
// libgomp keeps, for every thread that has started a parallel region, that region's helper
// threads alive for its next region (a pool per starting thread). While the process holds more
// such threads than it has CPUs, every team stops spinning between regions and sleeps on a
// futex instead, so each of a decode step's ~60 regions pays a sleep and a wake-up: on the
// 2-core development VM a plain step of the built-in policy took 4.2 ms instead of 1.0 ms on a
// worker thread once the main thread had run one parallel region (docs/benchmarks.md).
//
// So a thread that runs parallel kernels and then waits for something (a worker with nothing to
// decode, the online trainer parked or between rounds, the main thread between phases) calls
// release_cpu_team() first: only busy threads then hold teams, and the next region of the
// releasing thread starts a fresh team (a few tens of microseconds).
#pragma once

namespace updraft {

// Ends the calling thread's pool of OpenMP helper threads, if it has one (their exit is joined).
// Inside a parallel region it does nothing. Other threads' pools are untouched.
void release_cpu_team();

}  // namespace updraft
