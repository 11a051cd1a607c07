package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
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
	// Meaning says what the most changed object is, when it is one the
	// benchmark knows.
	Meaning string `json:"meaning,omitempty"`
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
}

// Meanings of known objects.
const (
	meaningLeaderLease       = "the agent's leader-election Lease"
	meaningVirtualNodeLease  = "a virtual node's Lease (node heartbeat)"
	meaningHeartbeat         = "the consumer's heartbeat Lease on the provider"
	meaningVirtualNodeStatus = "a virtual node's status"
)

type changeKey struct{ resource, event, writer string }

// changeWatch watches every resource of a cluster and counts changes.
type changeWatch struct {
	cluster string
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	counts  map[changeKey]map[string]int // object → changes
	errs    []string
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
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	cw := &changeWatch{cluster: k.Name(), cancel: cancel, counts: map[changeKey]map[string]int{}}
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
			cur, err := ri.List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				cw.errs = append(cw.errs, fmt.Sprintf("list %s: %v", gvr, err))
				continue
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
	key := changeKey{resource: resource, event: string(ev.Type), writer: writer}
	if cw.counts[key] == nil {
		cw.counts[key] = map[string]int{}
	}
	obj := u.GetName()
	if ns := u.GetNamespace(); ns != "" {
		obj = ns + "/" + obj
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
		c := ObjectChanges{Cluster: cw.cluster, Resource: k.resource, Event: k.event, Writer: k.writer}
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
		if len(names) > 0 {
			c.Meaning = meaning(k.resource, names[0])
		}
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
		return fmt.Sprint(c[i].Cluster, c[i].Resource, c[i].Writer) < fmt.Sprint(c[j].Cluster, c[j].Resource, c[j].Writer)
	})
}
