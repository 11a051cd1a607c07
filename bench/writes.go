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
	"time"
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

// Stages of an offloaded pod, in order, as the audit logs show them: the
// first is the Deployment's creation (the trial's start; the audit record of
// a pod created with a generated name does not name it), each other one the
// first (for the status writes, the last) successful write of that kind to
// the pod's objects, all named after the pod.
var offloadedStages = []stageRule{
	{name: "start"},
	{"bound", consumerName, "create", "pods/binding", false},   // the consumer's scheduler
	{"shadowpod", providerName, "create", "shadowpods", false}, // the consumer's agent
	{"remote pod", providerName, "create", "pods", false},      // the provider's agent
	{"remote bound", providerName, "create", "pods/binding", false},
	{"remote running", providerName, "patch", "pods/status", false}, // kwok
	{"ready", consumerName, "update", "pods/status", true},          // the consumer's agent
}

// directStages are those of a pod created on the provider directly.
var directStages = []stageRule{
	{name: "start"},
	{"bound", providerName, "create", "pods/binding", false},
	{"running", providerName, "patch", "pods/status", false},
}

type stageRule struct {
	name, cluster, verb, resource string
	last                          bool
}

// StageDelay is the time between two consecutive stages of a trial's pods
// (seconds, over the pods that have both), from the audit logs' stage
// timestamps.
type StageDelay struct {
	From string  `json:"from"`
	To   string  `json:"to"`
	Pods int     `json:"pods"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	// First is this delay for the pod that reached the last stage first.
	First float64 `json:"first"`
}

// stageEvent is the part of an audit event stage timing needs.
type stageEvent struct {
	Stage          string    `json:"stage"`
	Verb           string    `json:"verb"`
	StageTimestamp time.Time `json:"stageTimestamp"`
	ObjectRef      *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// stageDelays reads the audit logs from the cursors and returns the delays
// between consecutive stages of rules for the pods of namespaces; a write
// whose audit record names no object (a create of a generated name may
// not) is left out. start is every pod's first stage; when it is zero, the
// first rule is matched like the others (pods created one by one).
func stageDelays(cursors []auditCursor, start time.Time, rules []stageRule, namespaces []string) ([]StageDelay, error) {
	at := map[string][]time.Time{} // pod name -> time per rule
	for _, c := range cursors {
		f, err := os.Open(c.path)
		if err != nil {
			return nil, err
		}
		if _, err := f.Seek(c.offset, io.SeekStart); err != nil {
			_ = f.Close()
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			var ev stageEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Stage != "ResponseComplete" || ev.ObjectRef == nil || ev.ObjectRef.Name == "" ||
				ev.ResponseStatus == nil || ev.ResponseStatus.Code < 200 || ev.ResponseStatus.Code > 299 || !contains(namespaces, ev.ObjectRef.Namespace) {
				continue
			}
			res := ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				res += "/" + ev.ObjectRef.Subresource
			}
			for i, r := range rules {
				if r.cluster != c.cluster || r.verb != ev.Verb || r.resource != res {
					continue
				}
				ts := at[ev.ObjectRef.Name]
				if ts == nil {
					ts = make([]time.Time, len(rules))
					ts[0] = start // zero when the first rule is a write of each pod's own
					at[ev.ObjectRef.Name] = ts
				}
				if ts[i].IsZero() || (r.last && ev.StageTimestamp.After(ts[i])) {
					ts[i] = ev.StageTimestamp
				}
			}
		}
		err = sc.Err()
		_ = f.Close()
		if err != nil {
			return nil, err
		}
	}
	// The pod that reached the last stage first.
	first := ""
	for name, ts := range at {
		if l := ts[len(rules)-1]; !l.IsZero() && (first == "" || l.Before(at[first][len(rules)-1])) {
			first = name
		}
	}
	var out []StageDelay
	for i := 1; i < len(rules); i++ {
		var d []float64
		for _, ts := range at {
			if !ts[i-1].IsZero() && !ts[i].IsZero() {
				d = append(d, ts[i].Sub(ts[i-1]).Seconds())
			}
		}
		s := summarize(d)
		sd := StageDelay{From: rules[i-1].name, To: rules[i].name, Pods: s.N, P50: s.P50, P99: s.P99, Max: s.Max}
		if first != "" && !at[first][i-1].IsZero() && !at[first][i].IsZero() {
			sd.First = at[first][i].Sub(at[first][i-1]).Seconds()
		}
		out = append(out, sd)
	}
	return out, nil
}

// stagesLine renders delays for a progress line.
func stagesLine(delays []StageDelay) string {
	var parts []string
	for _, d := range delays {
		parts = append(parts, fmt.Sprintf("%s→%s p50 %.2fs p99 %.2fs (first pod %.2fs)", d.From, d.To, d.P50, d.P99, d.First))
	}
	return strings.Join(parts, "; ")
}
