package podreflector

// Reachability is what the virtual node knows about its provider.
type Reachability int

const (
	// Unknown: no verdict yet (the agent just started and the provider has
	// not been probed). Nothing is marked or unmarked, nothing remote is
	// done: the pods keep the state the previous agent left them in.
	Unknown Reachability = iota
	// Reachable: the provider's API server passes its health probes.
	Reachable
	// Unreachable: the provider's API server fails its health probes.
	Unreachable
	// PermanentlyUnreachable: the provider's ForeignCluster has
	// spec.unreachable set (forced unpeer) or is gone: every remote
	// operation is skipped for good and local deletions complete at once.
	PermanentlyUnreachable
)

// String implements fmt.Stringer.
func (r Reachability) String() string {
	switch r {
	case Reachable:
		return "Reachable"
	case Unreachable:
		return "Unreachable"
	case PermanentlyUnreachable:
		return "PermanentlyUnreachable"
	default:
		return "Unknown"
	}
}
