package virtualnode_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/annexhq/annex/internal/localcluster/clustertest"
	"github.com/annexhq/annex/internal/virtualnode/eventreflector"
)

// TestProviderEventsComeHome: provider Events about an offloaded pod and
// its ShadowPod appear on the local pod, a repeat updates the local Event,
// a restarted agent writes nothing again, and Events about pods this node
// did not offload are ignored.
func TestProviderEventsComeHome(t *testing.T) {
	ctx, te := integration(t, 4*time.Minute)
	cc, pc := te.cc, te.pc
	lcs, err := kubernetes.NewForConfig(te.ccfg)
	clustertest.Must(t, err)
	pcs, err := kubernetes.NewForConfig(te.pcfg)
	clustertest.Must(t, err)

	start := func() (stop func()) {
		agentCtx, stopAgent := context.WithCancel(ctx)
		done, _ := runAgent(agentCtx, t, te.ccfg, te.pcfg, te.scheme)
		return func() {
			stopAgent()
			<-done
		}
	}
	stop := start()
	defer func() { stop() }()

	local := createPod(ctx, t, cc, "ev")
	waitShadowPod(ctx, t, pc, "ev")
	remotePod := &corev1.Pod{}
	clustertest.Eventually(t, 30*time.Second, "provider pod ev", func() error {
		return pc.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: "ev"}, remotePod)
	})
	// A local pod of the same name as a provider pod, not on the virtual
	// node (it stays Pending: no node matches its selector).
	stranger := newPod("stranger")
	stranger.Spec.NodeName = ""
	stranger.Spec.NodeSelector = map[string]string{"no-such": "node"}
	clustertest.Must(t, cc.Create(ctx, stranger))

	now := time.Now().Truncate(time.Second)
	providerEvent := func(name, kind, apiVersion, object, typ, reason, msg string) *corev1.Event {
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: remoteNS, Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: kind, APIVersion: apiVersion, Namespace: remoteNS, Name: object},
			Type:           typ, Reason: reason, Message: msg, Count: 1,
			FirstTimestamp: metav1.NewTime(now), LastTimestamp: metav1.NewTime(now),
			Source: corev1.EventSource{Component: "kubelet"},
		}
		created, err := pcs.CoreV1().Events(remoteNS).Create(ctx, ev, metav1.CreateOptions{})
		clustertest.Must(t, err)
		return created
	}
	backOff := providerEvent("ev.backoff", "Pod", "v1", "ev", corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container c")
	providerEvent("ev.refused", "ShadowPod", "offloading.annex.dev/v1alpha1", "ev", corev1.EventTypeNormal, "Checked", "looked at it")
	providerEvent("stranger.x", "Pod", "v1", "stranger", corev1.EventTypeWarning, "Failed", "not yours")
	providerEvent("nobody.x", "Pod", "v1", "nobody", corev1.EventTypeWarning, "Failed", "no such pod")
	providerEvent("ev.odd", "Pod", "v1", "ev", "Odd", "Weird", "neither Normal nor Warning")
	providerEvent("ev.scheduled", "Pod", "v1", "ev", corev1.EventTypeNormal, eventreflector.ReasonScheduled, "Successfully assigned to beta-node-0")

	localEvents := func() map[string]corev1.Event { // by reason
		list, err := lcs.CoreV1().Events(localNS).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("source", eventreflector.SourceComponent(providerID)).String()})
		clustertest.Must(t, err)
		out := map[string]corev1.Event{}
		for _, ev := range list.Items {
			if _, dup := out[ev.Reason]; dup {
				t.Errorf("two local Events with reason %s", ev.Reason)
			}
			out[ev.Reason] = ev
		}
		return out
	}
	check := func(ev corev1.Event, typ, msg string, count int32) error {
		if ev.InvolvedObject.Name != "ev" || ev.InvolvedObject.UID != local.UID || ev.InvolvedObject.Kind != "Pod" {
			return fmt.Errorf("about %+v", ev.InvolvedObject)
		}
		if ev.Type != typ || ev.Message != msg || ev.Count != count {
			return fmt.Errorf("type %s, message %q, count %d", ev.Type, ev.Message, ev.Count)
		}
		if got := ev.Annotations[eventreflector.AnnotationProviderEventCount]; got != fmt.Sprint(count) {
			return fmt.Errorf("count annotation %q", got)
		}
		return nil
	}
	clustertest.Eventually(t, 30*time.Second, "provider Events on the local pod", func() error {
		// The provider's scheduler's Scheduled Event does not come: the
		// local scheduler recorded the pod's own.
		evs := localEvents()
		for _, r := range []string{"Failed", "Weird", eventreflector.ReasonScheduled} {
			if ev, ok := evs[r]; ok {
				t.Fatalf("reflected %s: %q", r, ev.Message)
			}
		}
		if err := check(evs["BackOff"], corev1.EventTypeWarning, "beta: Back-off restarting failed container c", 1); err != nil {
			return fmt.Errorf("BackOff: %w", err)
		}
		return check(evs["Checked"], corev1.EventTypeNormal, "beta: looked at it", 1)
	})

	// A repeat on the provider updates the local Event.
	backOff.Count = 2
	backOff.LastTimestamp = metav1.NewTime(now.Add(2 * time.Second))
	_, err = pcs.CoreV1().Events(remoteNS).Update(ctx, backOff, metav1.UpdateOptions{})
	clustertest.Must(t, err)
	clustertest.Eventually(t, 30*time.Second, "repeat reflected", func() error {
		return check(localEvents()["BackOff"], corev1.EventTypeWarning, "beta: Back-off restarting failed container c", 2)
	})
	before := localEvents()

	// A new agent writes nothing again: once it reflected an Event created
	// after its start, the earlier ones are as they were.
	stop()
	stop = start()
	providerEvent("ev.sentinel", "Pod", "v1", "ev", corev1.EventTypeNormal, "Sentinel", "after the restart")
	clustertest.Eventually(t, 60*time.Second, "sentinel reflected", func() error {
		if _, ok := localEvents()["Sentinel"]; !ok {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	after := localEvents()
	t.Logf("local Events after the restart: %d", len(after))
	for reason, ev := range before {
		if a := after[reason]; a.ResourceVersion != ev.ResourceVersion || a.Count != ev.Count {
			t.Errorf("%s written again after the restart: count %d -> %d", reason, ev.Count, a.Count)
		}
	}
	if len(after) != len(before)+1 {
		t.Errorf("local Events after the restart: %d, want %d", len(after), len(before)+1)
	}
	for _, r := range []string{"Failed", "Weird"} {
		if ev, ok := after[r]; ok {
			t.Errorf("reflected %s: %q", r, ev.Message)
		}
	}
	// Nothing about the pod that is not on the node.
	list, err := lcs.CoreV1().Events(localNS).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "stranger").String()})
	clustertest.Must(t, err)
	for _, ev := range list.Items {
		if ev.Source.Component == eventreflector.SourceComponent(providerID) {
			t.Errorf("reflected an Event about a pod not offloaded here: %s", ev.Message)
		}
	}
}
