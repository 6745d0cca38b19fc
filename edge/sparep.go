package edge

import "runtime"

// SpareP returns how many event loops to run (loops, or GOMAXPROCS when
// loops is 0) and raises GOMAXPROCS to at least one more than that.
//
// A loop with nothing to do blocks in epoll_wait as a system call that
// holds its P. When every P is held so, the runtime's monitor thread
// (sysmon) finds no idle P and takes one back from its system call on
// every tick (20 µs), handing it to a thread it wakes to spin, which finds
// nothing to run and sleeps again; the loop then takes its P back. At
// GOMAXPROCS=2 under load that churn was ~10% of kvca's CPU (the monitor
// thread alone ~3.5 µs per 1 KB request, 4,000 wake-ups a second). With
// an idle P the monitor leaves system calls alone for 10 ms and sleeps,
// and the rest of the process (health checks, handed-over connections,
// the admin listener) runs there without waiting for a loop to yield.
//
// GOMAXPROCS is the process's, so the command calls this, not the Server.
func SpareP(loops int) int {
	if loops <= 0 {
		loops = runtime.GOMAXPROCS(0)
	}
	if runtime.GOMAXPROCS(0) < loops+1 {
		runtime.GOMAXPROCS(loops + 1)
	}
	return loops
}
