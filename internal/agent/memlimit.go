package agent

import (
	"fmt"
	"strconv"
	"strings"
)

// MemoryLimitEnv is the environment variable through which the chart
// passes the agent container's memory limit, in bytes (the downward API's
// resourceFieldRef limits.memory: the node's allocatable memory when the
// container has no limit).
const MemoryLimitEnv = "ANNEX_MEMORY_LIMIT"

// memoryLimitShare is the part of the container's memory limit that the Go
// runtime's soft limit is set to: the rest is for what the runtime does
// not count (the executable's pages, which the kernel charges to the
// container, and C allocations).
const memoryLimitShare = 0.9

// GoMemoryLimit returns the soft memory limit to give the Go runtime
// (runtime/debug.SetMemoryLimit), from the environment read by getenv:
// 90 % of MemoryLimitEnv, and 0 (leave the runtime's default) when
// GOMEMLIMIT is set (the runtime has read it) or MemoryLimitEnv is not.
// With a limit, the garbage collector runs more often as the heap nears
// it, instead of the container being killed for memory; below it nothing
// changes (GOGC still sets the pace).
func GoMemoryLimit(getenv func(string) string) (int64, error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	v := strings.TrimSpace(getenv(MemoryLimitEnv))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want the container's memory limit in bytes", MemoryLimitEnv, v)
	}
	return int64(float64(n) * memoryLimitShare), nil
}
