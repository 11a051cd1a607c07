package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// WriteCount is how many write requests one writer sent one API server for
// one verb and resource during a burst trial, as the API server's audit log
// recorded them (localcluster.Options.AuditWrites).
type WriteCount struct {
	Cluster string `json:"cluster"`
	// Writer is the program of the request's user agent and, for a
	// ServiceAccount, its name (kube-controller-manager's controllers
	// each have their own; Annex's consumer agent writes to the provider
	// as its tenant's ServiceAccount).
	Writer string `json:"writer"`
	Verb   string `json:"verb"`
	// Resource is resource[/subresource], without the group.
	Resource string `json:"resource"`
	// Result is "" for a 2xx answer, else the HTTP code.
	Result string `json:"result,omitempty"`
	Count  int    `json:"count"`
}

// Annex reports whether the writer is one of Annex's agents: the agent's
// ServiceAccount in annex-system, or a consumer's tenant ServiceAccount on
// a provider.
func (w WriteCount) Annex() bool {
	_, user, _ := strings.Cut(w.Writer, " as ")
	return strings.HasPrefix(user, "annex-system:") || strings.HasPrefix(user, "annex-tenant-")
}

// auditEvent is what the benchmark reads of an audit.k8s.io/v1 Event.
type auditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// auditCursor is a position in an API server's audit log.
type auditCursor struct {
	cluster, path string
	offset        int64
}

// auditMark returns the current end of k's audit log; ok is false when k
// does not write one.
func auditMark(k *kube) (auditCursor, bool) {
	path := k.AuditLogPath()
	if path == "" {
		return auditCursor{}, false
	}
	c := auditCursor{cluster: k.Name(), path: path}
	if fi, err := os.Stat(path); err == nil {
		c.offset = fi.Size()
	}
	return c, true
}

// writesSince counts the writes the audit log recorded after c to objects
// in namespaces (none: every namespace and cluster-scoped objects).
func writesSince(c auditCursor, namespaces ...string) ([]WriteCount, error) {
	f, err := os.Open(c.path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(c.offset, io.SeekStart); err != nil {
		return nil, err
	}
	return countWrites(f, c.cluster, namespaces)
}

// countWrites counts the completed write requests of the audit log r.
func countWrites(r io.Reader, cluster string, namespaces []string) ([]WriteCount, error) {
	counts := map[WriteCount]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			// The last line may be cut by a write in progress.
			continue
		}
		if ev.Stage != "ResponseComplete" || ev.ObjectRef == nil {
			continue
		}
		if len(namespaces) > 0 && !contains(namespaces, ev.ObjectRef.Namespace) {
			continue
		}
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		k := WriteCount{Cluster: cluster, Writer: writerOf(ev.UserAgent, ev.User.Username), Verb: ev.Verb, Resource: res}
		if ev.ResponseStatus != nil && (ev.ResponseStatus.Code < 200 || ev.ResponseStatus.Code > 299) {
			k.Result = strconv.Itoa(ev.ResponseStatus.Code)
		}
		counts[k]++
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]WriteCount, 0, len(counts))
	for k, n := range counts {
		k.Count = n
		out = append(out, k)
	}
	sortWrites(out)
	return out, nil
}

// writerOf names a writer: the user agent's program, and the user
// ("<namespace>:<name>" for a ServiceAccount).
func writerOf(userAgent, user string) string {
	prog, _, _ := strings.Cut(userAgent, "/")
	prog, _, _ = strings.Cut(prog, " ")
	if sa, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok {
		user = sa
	}
	return prog + " as " + user
}

func sortWrites(w []WriteCount) {
	sort.Slice(w, func(i, j int) bool {
		a, b := w[i], w[j]
		if a.Cluster != b.Cluster {
			return a.Cluster < b.Cluster
		}
		if a.Annex() != b.Annex() {
			return a.Annex()
		}
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return fmt.Sprint(a) < fmt.Sprint(b)
	})
}

// annexWritesPerPod is the number of Annex's writes in w per pod of a
// burst of n.
func annexWritesPerPod(w []WriteCount, n int) float64 {
	total := 0
	for _, c := range w {
		if c.Annex() {
			total += c.Count
		}
	}
	return float64(total) / float64(n)
}

// writesLine renders w's Annex writes per pod, one "cluster verb resource
// ×k" entry each, for a progress line.
func writesLine(w []WriteCount, n int) string {
	var parts []string
	for _, c := range w {
		if !c.Annex() {
			continue
		}
		s := fmt.Sprintf("%s %s %s %.2f", c.Cluster, strings.ToLower(c.Verb), c.Resource, float64(c.Count)/float64(n))
		if c.Result != "" {
			s += " (" + c.Result + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}
