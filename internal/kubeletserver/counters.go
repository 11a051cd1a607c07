package kubeletserver

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// counterStart is a new counter's value in CPU-seconds: metrics-server
// drops a container whose cumulative CPU is 0, as an idle new container's
// would be.
const counterStart = 1e-6

// counterKey names one CPU counter: a container of a pod of a node, or the
// node itself (Pod empty).
type counterKey struct {
	Node, Namespace, Pod string
	UID                  types.UID
	Container            string
}

// cpuCounter turns the provider's CPU rate into a kubelet's cumulative
// counter on the agent's own clock.
type cpuCounter struct {
	seconds float64   // cumulative CPU-seconds
	at      time.Time // agent clock: integrated up to here
	started time.Time // agent clock: when the counter began
	rate    float64   // cores, the last rate the provider reported
	sampled time.Time // the provider's timestamp of that rate
}

// counters holds the CPU counters of every virtual node of the agent.
// They live in memory: after an agent restart they begin again, with a new
// start time, which metrics-server takes as a restarted container.
type counters struct {
	mu sync.Mutex
	m  map[counterKey]*cpuCounter
}

func newCounters() *counters { return &counters{m: map[counterKey]*cpuCounter{}} }

// advance integrates key's counter up to now (the agent's clock) at rate
// (cores) and returns its value and start time. The rate counts from the
// previous call on: metrics-server's rate between two scrapes is the rate
// the provider reported last. sampled is the provider's timestamp of rate;
// a rate not newer than the one already known (a provider clock that is
// off, an old sample served again) changes nothing. Time that goes
// backwards integrates nothing: a counter never decreases.
func (c *counters) advance(key counterKey, now time.Time, rate float64, sampled time.Time) (float64, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctr, ok := c.m[key]
	if !ok {
		ctr = &cpuCounter{seconds: counterStart, at: now, started: now}
		c.m[key] = ctr
	}
	if ctr.sampled.IsZero() || sampled.After(ctr.sampled) {
		ctr.rate, ctr.sampled = rate, sampled
	}
	if d := now.Sub(ctr.at); d > 0 {
		ctr.seconds += ctr.rate * d.Seconds()
		ctr.at = now
	}
	return ctr.seconds, ctr.started
}

// prune forgets node's counters that are not in keep.
func (c *counters) prune(node string, keep map[counterKey]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if k.Node == node && !keep[k] {
			delete(c.m, k)
		}
	}
}
