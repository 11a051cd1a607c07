package eventreflector

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var t0 = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

func providerEvent(mut func(*corev1.Event)) *corev1.Event {
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: "web-alpha", Name: "p.1", UID: "e1"},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: "web-alpha", Name: "p", UID: "remote-uid",
		},
		Type: corev1.EventTypeWarning, Reason: "BackOff", Message: "Back-off restarting failed container",
		Count: 3, FirstTimestamp: metav1.NewTime(t0), LastTimestamp: metav1.NewTime(t0.Add(time.Minute)),
	}
	if mut != nil {
		mut(ev)
	}
	return ev
}

func mapped(remote string) (string, bool) {
	if remote == "web-alpha" {
		return "web", true
	}
	return "", false
}

func TestTranslate(t *testing.T) {
	want := Reflection{Pod: "web/p", UID: "e1", Count: 3, Last: t0.Add(time.Minute),
		Type: corev1.EventTypeWarning, Reason: "BackOff", Message: "beta: Back-off restarting failed container"}
	tests := []struct {
		name string
		mut  func(*corev1.Event)
		want *Reflection // nil: dropped
	}{
		{name: "pod event", want: &want},
		{name: "shadowpod event", mut: func(e *corev1.Event) {
			e.InvolvedObject.Kind, e.InvolvedObject.APIVersion = "ShadowPod", "offloading.annex.dev/v1alpha1"
		}, want: &want},
		{name: "normal", mut: func(e *corev1.Event) { e.Type = corev1.EventTypeNormal }, want: func() *Reflection {
			w := want
			w.Type = corev1.EventTypeNormal
			return &w
		}()},
		{name: "the provider scheduler's Scheduled", mut: func(e *corev1.Event) {
			e.Type, e.Reason = corev1.EventTypeNormal, ReasonScheduled
		}},
		{name: "a Warning Scheduled", mut: func(e *corev1.Event) { e.Reason = ReasonScheduled }, want: func() *Reflection {
			w := want
			w.Reason = ReasonScheduled
			return &w
		}()},
		{name: "other type", mut: func(e *corev1.Event) { e.Type = "Critical" }},
		{name: "no type", mut: func(e *corev1.Event) { e.Type = "" }},
		{name: "no UID", mut: func(e *corev1.Event) { e.UID = "" }},
		{name: "other kind", mut: func(e *corev1.Event) { e.InvolvedObject.Kind = "Service" }},
		{name: "pod of another group", mut: func(e *corev1.Event) { e.InvolvedObject.APIVersion = "evil.example/v1" }},
		{name: "shadowpod of core group", mut: func(e *corev1.Event) { e.InvolvedObject.Kind = "ShadowPod" }},
		{name: "bad apiVersion", mut: func(e *corev1.Event) { e.InvolvedObject.APIVersion = "a/b/c" }},
		{name: "object in another namespace", mut: func(e *corev1.Event) { e.InvolvedObject.Namespace = "kube-system" }},
		{name: "namespace not offloaded", mut: func(e *corev1.Event) {
			e.Namespace, e.InvolvedObject.Namespace = "other", "other"
		}},
		{name: "no name", mut: func(e *corev1.Event) { e.InvolvedObject.Name = "" }},
		{name: "name with slash", mut: func(e *corev1.Event) { e.InvolvedObject.Name = "a/b" }},
		{name: "name too long", mut: func(e *corev1.Event) { e.InvolvedObject.Name = strings.Repeat("a", 254) }},
		{name: "no reason", mut: func(e *corev1.Event) { e.Reason = "" }},
		{name: "reason too long", mut: func(e *corev1.Event) { e.Reason = strings.Repeat("R", 129) }},
		{name: "reason with spaces", mut: func(e *corev1.Event) { e.Reason = "Back Off" }},
		{name: "reason not ASCII", mut: func(e *corev1.Event) { e.Reason = "Bäck" }},
		{name: "series of an events.k8s.io event", mut: func(e *corev1.Event) {
			e.Count, e.LastTimestamp, e.FirstTimestamp = 0, metav1.Time{}, metav1.Time{}
			e.EventTime = metav1.NewMicroTime(t0)
			e.Series = &corev1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(t0.Add(time.Minute + 300*time.Millisecond))}
		}, want: &want},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Translate(providerEvent(tt.mut), "beta", mapped)
			if tt.want == nil {
				if ok {
					t.Fatalf("reflected %+v, want dropped", got)
				}
				return
			}
			if !ok {
				t.Fatal("dropped")
			}
			if d := cmp.Diff(*tt.want, got); d != "" {
				t.Errorf("-want +got:\n%s", d)
			}
		})
	}
	if _, ok := Translate(nil, "beta", mapped); ok {
		t.Error("nil Event reflected")
	}
}

func TestBoundMessage(t *testing.T) {
	long := strings.Repeat("é", 1000) // 2000 bytes
	tests := []struct{ name, in, want string }{
		{"plain", "pulled", "beta: pulled"},
		{"empty", "", "beta: "},
		{"newlines kept, other controls dropped", "a\nb\tc\x00d\x1be", "beta: a\nb\tcde"},
		{"invalid UTF-8", "a\xffb", "beta: a\uFFFDb"},
		{"cut on a rune boundary", long, "beta: " + strings.Repeat("é", (MaxMessageBytes-len("beta: "))/2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BoundMessage("beta", tt.in)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("-want +got:\n%s", d)
			}
			if len(got) > MaxMessageBytes {
				t.Errorf("%d bytes", len(got))
			}
		})
	}
}

func TestReflectedState(t *testing.T) {
	r := Reflection{Pod: "web/p", UID: "e1", Count: 3, Last: t0}
	type step struct {
		name string
		do   func(*reflected)
		r    Reflection
		want bool // advanced
	}
	steps := []step{
		{name: "new", r: r, want: true},
		{name: "reflected", do: func(s *reflected) { s.set(r.Pod, r.UID, r.Count, r.Last) }, r: r, want: false},
		{name: "count advanced", r: func() Reflection { x := r; x.Count++; return x }(), want: true},
		{name: "last advanced", r: func() Reflection { x := r; x.Last = t0.Add(time.Second); return x }(), want: true},
		{name: "older", r: func() Reflection { x := r; x.Count--; x.Last = t0.Add(-time.Hour); return x }(), want: false},
		{name: "set never goes back", do: func(s *reflected) { s.set(r.Pod, r.UID, 1, t0.Add(-time.Hour)) }, r: r, want: false},
		{name: "another event of the pod", r: func() Reflection { x := r; x.UID = "e2"; return x }(), want: true},
		{name: "event forgotten", do: func(s *reflected) { s.forgetEvent(r.Pod, r.UID) }, r: r, want: true},
		{name: "pod forgotten", do: func(s *reflected) {
			s.set(r.Pod, r.UID, r.Count, r.Last)
			s.forgetPod(r.Pod)
		}, r: r, want: true},
	}
	s := newReflected()
	for _, st := range steps {
		if st.do != nil {
			st.do(s)
		}
		if got := s.advanced(st.r); got != st.want {
			t.Errorf("%s: advanced = %v, want %v", st.name, got, st.want)
		}
	}
	if n := s.size(); n != 0 {
		t.Errorf("%d events remembered after the pod was forgotten", n)
	}
}

func TestSeed(t *testing.T) {
	local := func(ns, pod string, ann map[string]string) corev1.Event {
		return corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod + ".x", Annotations: ann},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod}}
	}
	good := Reflection{Pod: "web/p", UID: "e1", Count: 4, Last: t0}
	s := newReflected()
	s.seed([]corev1.Event{
		local("web", "p", good.Annotations()),
		// an older write of the same provider Event
		local("web", "p", Reflection{UID: "e1", Count: 2, Last: t0.Add(-time.Hour)}.Annotations()),
		local("web", "q", nil),
		local("web", "r", map[string]string{AnnotationProviderEventUID: "e3", AnnotationProviderEventCount: "x",
			AnnotationProviderEventLast: t0.Format(time.RFC3339)}),
		local("web", "s", map[string]string{AnnotationProviderEventUID: "e4", AnnotationProviderEventCount: "1",
			AnnotationProviderEventLast: "yesterday"}),
	})
	want := map[string]map[types.UID]mark{"web/p": {"e1": {count: 4, last: t0}}}
	if d := cmp.Diff(want, s.byPod, cmp.AllowUnexported(mark{})); d != "" {
		t.Errorf("-want +got:\n%s", d)
	}
	if s.advanced(good) {
		t.Error("a seeded Event counts as not reflected")
	}
}

type patchSink struct{ data []byte }

func (s *patchSink) Create(ev *corev1.Event) (*corev1.Event, error) { return ev, nil }
func (s *patchSink) Update(ev *corev1.Event) (*corev1.Event, error) { return ev, nil }
func (s *patchSink) Patch(ev *corev1.Event, data []byte) (*corev1.Event, error) {
	s.data = data
	return ev, nil
}

func TestAnnotatingSinkPatch(t *testing.T) {
	inner := &patchSink{}
	s := &annotatingSink{inner: inner}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationProviderEventCount: "5"}}}
	if _, err := s.Patch(ev, []byte(`{"count":2,"message":"m"}`)); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(inner.data, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"count": float64(2), "message": "m",
		"metadata": map[string]any{"annotations": map[string]any{AnnotationProviderEventCount: "5"}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("-want +got:\n%s", d)
	}
}
