// Package metrics owns the Prometheus metrics Annex adds to the agent's
// metrics endpoint (controller-runtime's registry, --metrics-bind-address).
//
//   - annex_peer_reachable{peer}: 1 while the peer's API server answers the
//     health probes, 0 while it does not (set on every verdict);
//   - annex_peer_transitions_total{peer,to}: reachability verdict changes;
//   - annex_offloaded_pod_notready_seconds{provider}: for each offloaded pod,
//     the time from the verdict "provider unreachable" to the pod's NotReady
//     status being written (what a Service waits for beyond detection).
//
// Besides these, the endpoint serves controller-runtime's and client-go's
// metrics, among them the work queues' (workqueue_adds_total,
// workqueue_depth, workqueue_queue_duration_seconds, ... by queue name):
// each controller's, and each virtual node's pod reflector queues
// pod-status-<node> and pod-remote-<node>. Only queues built by
// controller-runtime report there: a plain client-go queue reports to the
// process's global provider, which k8s.io/component-base's workqueue
// package claims first (it comes with the kubelet endpoint's
// k8s.io/apiserver) and which nothing serves.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// PeerReachable is 1 while a peer answers, 0 while it does not.
	PeerReachable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "annex_peer_reachable",
		Help: "1 while the peer's API server answers the health probes, 0 while it does not.",
	}, []string{"peer"})

	// PeerTransitions counts reachability verdict changes.
	PeerTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "annex_peer_transitions_total",
		Help: "Reachability verdict changes of a peer, by the state it changed to.",
	}, []string{"peer", "to"})

	// PodNotReadySeconds is the time from a provider's unreachable verdict
	// to one of its offloaded pods being written NotReady.
	PodNotReadySeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "annex_offloaded_pod_notready_seconds",
		Help:    "Time from the verdict that a provider is unreachable to an offloaded pod on it being marked NotReady.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30},
	}, []string{"provider"})
)

func init() {
	crmetrics.Registry.MustRegister(PeerReachable, PeerTransitions, PodNotReadySeconds)
}

// Forget drops the series of a peer that is gone.
func Forget(peer string) {
	PeerReachable.DeleteLabelValues(peer)
	PeerTransitions.DeletePartialMatch(prometheus.Labels{"peer": peer})
	PodNotReadySeconds.DeleteLabelValues(peer)
}
