//go:build !linux

package gateway

import (
	"errors"

	"github.com/go-logr/logr"
)

// Dataplane needs Linux (TUN devices, policy routing, nftables); elsewhere
// every Apply fails, so that annex-gateway says so instead of not building.
type Dataplane struct{}

// New returns a Dataplane that cannot program anything.
func New(logr.Logger) *Dataplane { return &Dataplane{} }

var errNotLinux = errors.New("annex-gateway needs Linux")

// Apply fails: see Dataplane.
func (*Dataplane) Apply(Config) error { return errNotLinux }

// Stats reports nothing.
func (*Dataplane) Stats(string) (Stats, bool) { return Stats{}, false }

// Close has nothing to remove.
func (*Dataplane) Close() error { return nil }
