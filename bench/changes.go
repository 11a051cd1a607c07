package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/agent"
)

// ObjectChanges counts the changes to objects of one resource that one
// writer made during an idle window, as the API server's watches report
// them. The writer is the manager of the object's most recent managedFields
// entry (the user agent's program name unless a client names itself, e.g.
// annex-agent, annex-virtual-node, kwok); deletions carry no writer.
type ObjectChanges struct {
	Cluster  string `json:"cluster"`
	Resource string `json:"resource"`
	Event    string `json:"event"`
	Writer   string `json:"writer"`
	Count    int    `json:"count"`
	// Objects names up to five of the objects, most changed first.
	Objects []string `json:"objects"`
	// Meaning says what the objects are, when they are ones the benchmark
	// knows (changes of objects of different meanings are counted apart).
	Meaning string `json:"meaning,omitempty"`
	// HeartbeatOnly: node status changes in which nothing but the
	// conditions' lastHeartbeatTime changed (counted apart from the node's
	// other changes).
	HeartbeatOnly bool `json:"heartbeatOnly,omitempty"`
	// Fields lists what the changes of a virtual node's status changed
	// (changedFields), lastHeartbeatTime apart.
	Fields []string `json:"fields,omitempty"`
}

// objectsText lists the changed objects, and for a virtual node's status
// the fields that changed.
func (c ObjectChanges) objectsText() string {
	s := strings.Join(c.Objects, ", ")
	if len(c.Fields) > 0 {
		s += " (changed: " + strings.Join(c.Fields, ", ") + ")"
	}
	return s
}

// meaning names the known objects that are written while nothing happens.
func meaning(resource, obj string) string {
	ns, name, _ := strings.Cut(obj, "/")
	switch {
	case resource == "leases.coordination.k8s.io" && obj == corev1alpha1.AgentNamespace+"/"+agent.DefaultOptions().LeaderElectionID:
		return meaningLeaderLease
	case resource == "leases.coordination.k8s.io" && ns == corev1.NamespaceNodeLease && strings.HasPrefix(name, corev1alpha1.VirtualNodeNamePrefix):
		return meaningVirtualNodeLease
	case resource == "leases.coordination.k8s.io" && ns == corev1.NamespaceNodeLease:
		return "a kwok node's Lease"
	case resource == "leases.coordination.k8s.io" && name == corev1alpha1.HeartbeatLeaseName:
		return meaningHeartbeat
	case resource == "foreignclusters.core.annex.dev":
		return "a peer's status (probe time and latency)"
	case resource == "nodes" && strings.HasPrefix(obj, corev1alpha1.VirtualNodeNamePrefix):
		return meaningVirtualNodeStatus
	case resource == "nodes":
		return "a kwok node's status"
	case resource == "pods":
		return "pods"
	case resource == "events.events.k8s.io":
		return "Events"
	}
	return ""
}

// liveness reports whether a change is a liveness write of Annex: the
// renewal of a Lease whose only purpose is to say "still alive" (the
// agent's leader-election Lease, a virtual node's Lease, the consumer's
// heartbeat Lease on the provider) or a virtual node status write that only
// moved lastHeartbeatTime. Kubernetes needs them (a node whose Lease is not
// renewed goes NotReady, a leader that does not renew is replaced); they
// are reported apart from the writes the status churn target is about.
func liveness(c ObjectChanges) bool {
	if !annexChange(c) {
		return false
	}
	switch c.Meaning {
	case meaningLeaderLease, meaningVirtualNodeLease, meaningHeartbeat:
		// A renewal, or the first one, which creates the Lease.
		return c.Event == string(watch.Modified) || c.Event == string(watch.Added)
	case meaningVirtualNodeHeartbeat:
		return c.Event == string(watch.Modified)
	}
	return false
}

// writerCluster names the cluster whose agent made a change: the agent of
// the cluster it happened on, but for the consumer's heartbeat Lease, which
// the consumer's agent renews on the provider.
func writerCluster(c ObjectChanges) string {
	if c.Meaning == meaningHeartbeat {
		return consumerName
	}
	return c.Cluster
}

// annexWriter reports whether a writer is one of Annex's clients.
func annexWriter(w string) bool { return strings.HasPrefix(w, "annex") }

// annexChange reports whether Annex made a change: one of its clients wrote
// it, or it is an object only Annex writes (a client without a user agent
// of its own shows as Go-http-client).
func annexChange(c ObjectChanges) bool {
	return annexWriter(c.Writer) || strings.HasSuffix(c.Resource, ".annex.dev") || annexObjects[c.Meaning]
}

// annexObjects are the meanings of objects only Annex writes.
var annexObjects = map[string]bool{
	meaningLeaderLease: true, meaningVirtualNodeLease: true, meaningHeartbeat: true, meaningVirtualNodeStatus: true,
	meaningVirtualNodeHeartbeat: true,
}

// Meanings of known objects.
const (
	meaningLeaderLease          = "the agent's leader-election Lease"
	meaningVirtualNodeLease     = "a virtual node's Lease (node heartbeat)"
	meaningHeartbeat            = "the consumer's heartbeat Lease on the provider"
	meaningVirtualNodeStatus    = "a virtual node's status"
	meaningVirtualNodeHeartbeat = "a virtual node's status heartbeat (only lastHeartbeatTime changed)"
)

// changeKey groups changes: by resource, event, writer and what the object
// is (its meaning), so that, say, the renewals of two different Leases by
// the same writer are told apart.
type changeKey struct {
	resource, event, writer, meaning string
	heartbeat                        bool // a node status change of lastHeartbeatTime only
}

// changeWatch watches every resource of a cluster and counts changes.
type changeWatch struct {
	cluster  string
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	counting bool                          // between count and hold
	counts   map[changeKey]map[string]int  // object → changes
	fields   map[changeKey]map[string]bool // of a virtual node's status: what changed
	nodes    map[string]*unstructured.Unstructured
	errs     []string
}

// count starts counting changes; hold stops it (the watches keep running
// until stop). They bracket the window the agents' metrics are read over,
// so that both count the same writes.
func (cw *changeWatch) count() { cw.setCounting(true) }
func (cw *changeWatch) hold()  { cw.setCounting(false) }

func (cw *changeWatch) setCounting(v bool) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	cw.counting = v
}

var nodesGVR = corev1.SchemeGroupVersion.WithResource("nodes")

// heartbeatOnly reports whether node b differs from a in nothing but its
// conditions' lastHeartbeatTime (and the metadata every write changes).
func heartbeatOnly(a, b *unstructured.Unstructured) bool {
	return len(changedFields(a, b)) == 0
}

// changedFields lists where node b differs from a, lastHeartbeatTime and
// the metadata every write changes apart: dotted paths, conditions by type
// ("status.conditions[Ready].status"), at most four levels deep.
func changedFields(a, b *unstructured.Unstructured) []string {
	strip := func(u *unstructured.Unstructured) map[string]any {
		c := u.DeepCopy()
		unstructured.RemoveNestedField(c.Object, "metadata", "resourceVersion")
		unstructured.RemoveNestedField(c.Object, "metadata", "managedFields")
		dropHeartbeats(c.Object)
		// virtual-kubelet keeps the node status it last wrote in an
		// annotation (JSON), heartbeat times included: without them it
		// changes only when the status does.
		if s, ok, _ := unstructured.NestedString(c.Object, "metadata", "annotations", vkLastAppliedStatus); ok {
			var st map[string]any
			if json.Unmarshal([]byte(s), &st) == nil {
				dropHeartbeats(map[string]any{"status": st})
				if j, err := json.Marshal(st); err == nil {
					_ = unstructured.SetNestedField(c.Object, string(j), "metadata", "annotations", vkLastAppliedStatus)
				}
			}
		}
		return c.Object
	}
	var out []string
	diffPaths("", strip(a), strip(b), 0, &out)
	return out
}

// vkLastAppliedStatus is the annotation in which virtual-kubelet's node
// controller keeps the node status it last wrote.
const vkLastAppliedStatus = "virtual-kubelet.io/last-applied-node-status"

// dropHeartbeats removes lastHeartbeatTime from the status.conditions of
// obj.
func dropHeartbeats(obj map[string]any) {
	conds, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
	for _, cond := range conds {
		if m, ok := cond.(map[string]any); ok {
			delete(m, "lastHeartbeatTime")
		}
	}
	if conds != nil {
		_ = unstructured.SetNestedSlice(obj, conds, "status", "conditions")
	}
}

// diffPaths appends to out the paths under prefix where a and b differ.
func diffPaths(prefix string, a, b any, depth int, out *[]string) {
	if equality.Semantic.DeepEqual(a, b) {
		return
	}
	name := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	as, asok := a.([]any)
	bs, bsok := b.([]any)
	if asok && bsok && strings.HasSuffix(prefix, "conditions") {
		am, bm, aok, bok = conditionsByType(as), conditionsByType(bs), true, true
		name = func(k string) string { return prefix + "[" + k + "]" }
	}
	if !aok || !bok || depth >= 4 {
		*out = append(*out, prefix)
		return
	}
	keys := maps.Collect(maps.All(am))
	maps.Copy(keys, bm)
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		diffPaths(name(k), am[k], bm[k], depth+1, out)
	}
}

// conditionsByType indexes a list of conditions by their type.
func conditionsByType(l []any) map[string]any {
	m := map[string]any{}
	for _, c := range l {
		if cm, ok := c.(map[string]any); ok {
			t, _ := cm["type"].(string)
			m[t] = cm
		}
	}
	return m
}

// watchChanges starts watching every listable and watchable resource of k
// from now on.
func watchChanges(ctx context.Context, k *kube) (*changeWatch, error) {
	lists, err := discovery.ServerPreferredResources(k.cs.Discovery())
	if err != nil && len(lists) == 0 {
		return nil, err
	}
	cfg := rest.CopyConfig(k.cfg)
	cfg.WarningHandler = rest.NoWarnings{} // "v1 Endpoints is deprecated"
	// The clients' request timeout would end every watch after it (30 s:
	// a window of 60 s counted the changes of its first half); ctx ends them.
	cfg.Timeout = 0
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	cw := &changeWatch{cluster: k.Name(), cancel: cancel, counts: map[changeKey]map[string]int{},
		fields: map[changeKey]map[string]bool{}, nodes: map[string]*unstructured.Unstructured{}}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "watch") {
				continue
			}
			if gv.Group == "" && r.Name == "events" {
				continue // the same objects as events.k8s.io's
			}
			gvr := gv.WithResource(r.Name)
			ri := dyn.Resource(gvr)
			opts := metav1.ListOptions{Limit: 1}
			if gvr == nodesGVR {
				opts.Limit = 0 // every node: a node's change is compared with its last version
			}
			cur, err := ri.List(ctx, opts)
			if err != nil {
				cw.errs = append(cw.errs, fmt.Sprintf("list %s: %v", gvr, err))
				continue
			}
			if gvr == nodesGVR {
				for i := range cur.Items {
					cw.nodes[cur.Items[i].GetName()] = &cur.Items[i]
				}
			}
			w, err := ri.Watch(ctx, metav1.ListOptions{ResourceVersion: cur.GetResourceVersion()})
			if err != nil {
				cw.errs = append(cw.errs, fmt.Sprintf("watch %s: %v", gvr, err))
				continue
			}
			name := r.Name
			if gv.Group != "" {
				name += "." + gv.Group
			}
			cw.wg.Add(1)
			go func() {
				defer cw.wg.Done()
				defer w.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case ev, ok := <-w.ResultChan():
						if !ok {
							return
						}
						cw.record(name, ev)
					}
				}
			}()
		}
	}
	return cw, nil
}

func (cw *changeWatch) record(resource string, ev watch.Event) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if ev.Type == watch.Error {
		cw.errs = append(cw.errs, fmt.Sprintf("watch %s: %v", resource, ev.Object))
		return
	}
	u, ok := ev.Object.(*unstructured.Unstructured)
	if !ok || ev.Type == watch.Bookmark {
		return
	}
	writer := ""
	if ev.Type != watch.Deleted {
		writer = lastWriter(u.GetManagedFields())
	}
	obj := u.GetName()
	if ns := u.GetNamespace(); ns != "" {
		obj = ns + "/" + obj
	}
	key := changeKey{resource: resource, event: string(ev.Type), writer: writer, meaning: meaning(resource, obj)}
	if resource == "nodes" {
		prev := cw.nodes[u.GetName()]
		var fields []string
		if ev.Type == watch.Modified && prev != nil {
			fields = changedFields(prev, u)
			key.heartbeat = len(fields) == 0
		}
		cw.nodes[u.GetName()] = u
		if key.heartbeat && key.meaning == meaningVirtualNodeStatus {
			key.meaning = meaningVirtualNodeHeartbeat
		}
		if cw.counting && key.meaning == meaningVirtualNodeStatus {
			if cw.fields[key] == nil {
				cw.fields[key] = map[string]bool{}
			}
			for _, f := range fields {
				cw.fields[key][f] = true
			}
		}
	}
	if !cw.counting {
		return
	}
	if cw.counts[key] == nil {
		cw.counts[key] = map[string]int{}
	}
	cw.counts[key][obj]++
}

// lastWriter names the manager of the most recent managedFields entry, with
// its operation and subresource.
func lastWriter(mf []metav1.ManagedFieldsEntry) string {
	var last *metav1.ManagedFieldsEntry
	for i := range mf {
		if last == nil || mf[i].Time != nil && (last.Time == nil || !mf[i].Time.Before(last.Time)) {
			last = &mf[i]
		}
	}
	if last == nil {
		return "(unknown)"
	}
	w := last.Manager + " " + string(last.Operation)
	if last.Subresource != "" {
		w += " " + last.Subresource
	}
	return w
}

// stop ends the watches and returns the changes, most frequent first.
func (cw *changeWatch) stop() ([]ObjectChanges, []string) {
	cw.cancel()
	cw.wg.Wait()
	cw.mu.Lock()
	defer cw.mu.Unlock()
	var out []ObjectChanges
	for k, objs := range cw.counts {
		c := ObjectChanges{Cluster: cw.cluster, Resource: k.resource, Event: k.event, Writer: k.writer, Meaning: k.meaning, HeartbeatOnly: k.heartbeat,
			Fields: slices.Sorted(maps.Keys(cw.fields[k]))}
		names := make([]string, 0, len(objs))
		for o, n := range objs {
			c.Count += n
			names = append(names, o)
		}
		sort.Slice(names, func(i, j int) bool {
			if objs[names[i]] != objs[names[j]] {
				return objs[names[i]] > objs[names[j]]
			}
			return names[i] < names[j]
		})
		for i, o := range names {
			if i == 5 {
				c.Objects = append(c.Objects, fmt.Sprintf("… %d more", len(names)-5))
				break
			}
			c.Objects = append(c.Objects, fmt.Sprintf("%s ×%d", o, objs[o]))
		}
		out = append(out, c)
	}
	sortChanges(out)
	return out, cw.errs
}

func sortChanges(c []ObjectChanges) {
	sort.Slice(c, func(i, j int) bool {
		if c[i].Count != c[j].Count {
			return c[i].Count > c[j].Count
		}
		return fmt.Sprint(c[i].Cluster, c[i].Resource, c[i].Writer, c[i].Meaning) < fmt.Sprint(c[j].Cluster, c[j].Resource, c[j].Writer, c[j].Meaning)
	})
}
