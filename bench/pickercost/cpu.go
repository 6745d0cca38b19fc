package pickercost

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime and stime in /proc/PID/stat: USER_HZ,
// which the kernel fixes at 100 for this interface on every
// architecture Go targets (sysconf(_SC_CLK_TCK) would need cgo).
const userHZ = 100

// processCPU is the CPU time (user plus system) the process pid has used
// so far, from /proc/pid/stat. Its resolution is 10 ms, which is why a
// phase runs enough requests to use many of those.
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(string(raw))
}

// parseStat reads utime and stime from a /proc/PID/stat line. The
// command name in parentheses may hold spaces and parentheses itself, so
// fields are counted from the last ')'.
func parseStat(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat line without a command name: %.40q", s)
	}
	// After ") " come state (field 3) … utime (14) and stime (15).
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat line with %d fields after the name, want at least 13", len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}
