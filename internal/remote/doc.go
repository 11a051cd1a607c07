// Package remote is the one place in Annex that talks to peer clusters.
//
// A Manager keeps, for every peer (keyed by cluster ID):
//
//   - a controller-runtime client and a clientset whose every request is
//     bounded by Options.CallTimeout, so a hung peer can never block a
//     reconciler for longer than that;
//   - a health prober: one goroutine that GETs /readyz every
//     Options.ProbeInterval with a per-probe timeout (Options.ProbeTimeout).
//     Probes never overlap. A peer becomes unreachable after
//     Options.FailureThreshold consecutive failures and reachable again after
//     Options.SuccessThreshold consecutive successes, so one lost probe
//     changes nothing and a flapping link does not flap the state. A probe
//     that times out while the peer answers the calls of its clients does
//     not count: the peer is overloaded, not hung;
//   - the APIServerReachable and Authenticated conditions, lastProbeTime and
//     probeLatency of the peer's ForeignCluster in the local cluster. They are
//     written with a merge patch on the status subresource only when a
//     condition changes (lastProbeTime/probeLatency with it, and also once
//     per Options.StatusRefresh when that is set), so a healthy steady
//     state costs no API writes.
//
// Controllers should not retry on connection errors. They ask Client for a
// peer's client, get ErrPeerUnreachable (or ErrPermanentlyUnreachable, or
// ErrUnknownPeer) while it cannot be used, and watch Subscribe with
// source.Channel to be triggered again when the peer's reachability
// changes. Code that is not a controller can register OnTransition callbacks.
//
// A peer whose ForeignCluster has spec.unreachable set is marked with
// SetPermanentlyUnreachable: it is never probed and Client refuses it, so
// every component skips remote operations and cleans up locally.
package remote
