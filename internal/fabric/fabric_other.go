//go:build !linux

package fabric

import (
	"errors"

	"github.com/go-logr/logr"
)

// Dataplane needs Linux (rtnetlink routes, nftables); elsewhere every call
// fails, so that the node agent says so instead of not building.
type Dataplane struct{}

// New returns a Dataplane that cannot program anything.
func New(logr.Logger) *Dataplane { return &Dataplane{} }

var errNotLinux = errors.New("the fabric's node data plane needs Linux")

// Apply fails: see Dataplane.
func (*Dataplane) Apply(Plan) error { return errNotLinux }

// Clean fails: see Dataplane.
func (*Dataplane) Clean() error { return errNotLinux }

// State fails: see Dataplane.
func (*Dataplane) State() (routes int, table bool, err error) { return 0, false, errNotLinux }
