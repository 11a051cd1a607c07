package fairqueue

import (
	"fmt"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Defaults of LimiterOptions. A tenant's legitimate syncs are rare (a
// label changed on its pods, an endpoint of one of its Services) and
// coalesce while they wait: a Service whose endpoints change all the time
// still has its slice written every 1/rate. The bound is what a tenant
// repeating changes at will costs the provider: each pod patch is also
// seen by the scheduler, kwok or the kubelet and every pod watcher, each
// EndpointSlice write by every kube-proxy. With a burst of 200 (tried
// first), a tenant that changed the annotations of its ShadowPods ~45 times
// a second on a busy 2-CPU provider had 73 % of them become pod patches
// (bench, tenants phase): the burst, earned back whenever it paused, was
// most of what it spent.
const (
	DefaultSyncRate  = 10
	DefaultSyncBurst = 20
)

// LimiterOptions are the per-tenant token bucket of a Limiter.
type LimiterOptions struct {
	// Rate is the writes per second each tenant is given (0: no bound).
	Rate float64
	// Burst is how many writes a tenant that was quiet may make at once.
	Burst int
}

// DefaultLimiterOptions are DefaultSyncRate and DefaultSyncBurst.
func DefaultLimiterOptions() LimiterOptions {
	return LimiterOptions{Rate: DefaultSyncRate, Burst: DefaultSyncBurst}
}

// BindFlags registers --tenant-sync-rate and --tenant-sync-burst on fs, with
// o's values as defaults.
func (o *LimiterOptions) BindFlags(fs *pflag.FlagSet) {
	fs.Float64Var(&o.Rate, "tenant-sync-rate", o.Rate,
		"writes per second this cluster, as a provider, makes for one consumer to follow changes of objects the consumer already has: "+
			"a pod's labels and annotations following its ShadowPod's, an EndpointSlice following its ShadowEndpointSlice; "+
			"beyond it (and --tenant-sync-burst) the consumer's further changes wait for their turn and are then written together, the latest state at once, "+
			"while other consumers' are not held up (0: no bound)")
	fs.IntVar(&o.Burst, "tenant-sync-burst", o.Burst,
		"how many such writes a consumer that was quiet may have made at once, before --tenant-sync-rate applies")
}

// Validate checks the options.
func (o LimiterOptions) Validate() error {
	switch {
	case o.Rate < 0:
		return fmt.Errorf("--tenant-sync-rate must not be negative, got %v", o.Rate)
	case o.Rate > 0 && o.Burst < 1:
		return fmt.Errorf("--tenant-sync-burst must be at least 1, got %d", o.Burst)
	}
	return nil
}

// staleAfter is how long past its turn a reservation is kept for a key
// that did not come back for it (its object was deleted), and how often
// the Limiter looks for such reservations and for idle tenants.
const staleAfter = time.Minute

// Limiter gives each tenant a token bucket for the writes the agent makes
// for it (see the package comment). It is safe for concurrent use; a nil
// Limiter, or one with rate 0, never makes anything wait.
type Limiter struct {
	rate  float64
	burst float64
	clock clock.PassiveClock

	mu      sync.Mutex
	tenants map[string]*bucket
	swept   time.Time
}

// bucket is one tenant's tokens and the turns it handed out.
type bucket struct {
	// tokens is what the bucket held at at: negative when turns were
	// handed out ahead of time (reserved).
	tokens float64
	at     time.Time
	// due are the turns handed out ahead of time, by key.
	due map[types.NamespacedName]time.Time
}

// NewLimiter returns a Limiter with the bucket of o on clk.
func NewLimiter(o LimiterOptions, clk clock.PassiveClock) *Limiter {
	return &Limiter{rate: o.Rate, burst: float64(max(o.Burst, 1)), clock: clk, tenants: map[string]*bucket{}}
}

// Wait asks for a write of tenant's object key. It returns 0 when the write
// may be made now: the tenant had a token, or the turn handed out to key
// earlier has come. Otherwise it hands key the tenant's next turn and
// returns how long until it comes (the caller requeues key for then, and
// writes what the object says at that time); asked again before then, it
// returns what is left of that wait, without taking another token. So a
// tenant makes at most burst writes at once and rate a second after that,
// each of its keys holds at most one turn, and other tenants are not
// concerned. tenant "" (the provider's own objects) never waits.
func (l *Limiter) Wait(tenant string, key types.NamespacedName) time.Duration {
	if l == nil || l.rate <= 0 || tenant == "" {
		return 0
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b, ok := l.tenants[tenant]
	if !ok {
		b = &bucket{tokens: l.burst, at: now, due: map[types.NamespacedName]time.Time{}}
		l.tenants[tenant] = b
	}
	if at, ok := b.due[key]; ok {
		if !now.Before(at) {
			delete(b.due, key)
			return 0
		}
		return at.Sub(now)
	}
	b.refill(now, l.rate, l.burst)
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	wait := max(time.Duration(-b.tokens/l.rate*float64(time.Second)), time.Millisecond)
	b.due[key] = now.Add(wait)
	return wait
}

// refill adds the tokens earned since b.at, up to burst.
func (b *bucket) refill(now time.Time, rate, burst float64) {
	if elapsed := now.Sub(b.at); elapsed > 0 {
		b.tokens = min(burst, b.tokens+elapsed.Seconds()*rate)
		b.at = now
	}
}

// sweep, at most every staleAfter, forgets the turns that were not taken
// staleAfter after they came (their tokens stay spent) and the tenants
// whose bucket is full again with no turn handed out (a new bucket is the
// same). It is called under l.mu.
func (l *Limiter) sweep(now time.Time) {
	if now.Sub(l.swept) < staleAfter {
		return
	}
	l.swept = now
	for tenant, b := range l.tenants {
		for key, at := range b.due {
			if now.Sub(at) > staleAfter {
				delete(b.due, key)
			}
		}
		b.refill(now, l.rate, l.burst)
		if len(b.due) == 0 && b.tokens >= l.burst {
			delete(l.tenants, tenant)
		}
	}
}
