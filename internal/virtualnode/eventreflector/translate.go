package eventreflector

import (
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// Annotations on every local Event written here: the provider Event it
// reflects and the count and last time reflected (see the package doc).
const (
	AnnotationProviderEventUID   = "annex.dev/provider-event-uid"
	AnnotationProviderEventCount = "annex.dev/provider-event-count"
	AnnotationProviderEventLast  = "annex.dev/provider-event-last-timestamp"
)

// Bounds of what a provider's Event can put into a local Event.
const (
	// MaxMessageBytes bounds the local Event's message, prefix included.
	MaxMessageBytes = 1024
	// MaxReasonLength bounds the reason (the API server's own limit for a
	// core/v1 Event's reason is 128).
	MaxReasonLength = 128
	// maxNameLength bounds the involved object's name (a pod name is a DNS
	// subdomain: 253).
	maxNameLength = 253
)

// SourceComponent is the source component of the local Events reflected
// from provider providerID.
func SourceComponent(providerID string) string { return "annex-" + providerID }

// Reflection is a local Event to write for one provider Event.
type Reflection struct {
	// Pod is the local pod's key, "<namespace>/<name>".
	Pod string
	// UID is the provider Event's UID; Count and Last its count and last
	// time, as the provider reports them.
	UID   types.UID
	Count int32
	Last  time.Time
	// Type, Reason and Message are those of the local Event: the
	// provider's, bounded, the message prefixed with "<provider>: ".
	Type, Reason, Message string
}

// Annotations are the annotations of the local Event of r.
func (r Reflection) Annotations() map[string]string {
	return map[string]string{
		AnnotationProviderEventUID:   string(r.UID),
		AnnotationProviderEventCount: strconv.FormatInt(int64(r.Count), 10),
		AnnotationProviderEventLast:  r.Last.UTC().Format(time.RFC3339),
	}
}

var shadowPodGroup = offloadingv1alpha1.GroupVersion.Group

// ReasonScheduled is the reason of a scheduler's Event that it bound a pod
// to a node: not reflected (see Translate).
const ReasonScheduled = "Scheduled"

// Translate returns the reflection of provider Event ev, whose namespace
// localNamespace maps to the local namespace (false: not offloaded here).
// ok is false for an Event that is not about a Pod or a ShadowPod, whose
// type is neither Normal nor Warning, that is the provider scheduler's
// Normal Scheduled Event of a pod, or that is malformed. It does not
// check that the local pod exists: the caller does.
func Translate(ev *corev1.Event, providerID string, localNamespace func(remote string) (string, bool)) (Reflection, bool) {
	if !Reflectable(ev) {
		return Reflection{}, false
	}
	local, ok := localNamespace(ev.Namespace)
	if !ok {
		return Reflection{}, false
	}
	count, last := Occurrences(ev)
	return Reflection{
		Pod:     local + "/" + ev.InvolvedObject.Name,
		UID:     ev.UID,
		Count:   count,
		Last:    last,
		Type:    ev.Type,
		Reason:  ev.Reason,
		Message: BoundMessage(providerID, ev.Message),
	}, true
}

// Reflectable reports whether provider Event ev is one that Translate
// reflects where its namespace is offloaded: what can be told from the
// Event alone.
func Reflectable(ev *corev1.Event) bool {
	if ev == nil || ev.UID == "" {
		return false
	}
	if ev.Type != corev1.EventTypeNormal && ev.Type != corev1.EventTypeWarning {
		return false
	}
	obj := ev.InvolvedObject
	gv, err := schema.ParseGroupVersion(obj.APIVersion)
	if err != nil {
		return false
	}
	switch {
	case obj.Kind == "Pod" && gv.Group == "":
	case obj.Kind == "ShadowPod" && gv.Group == shadowPodGroup:
	default:
		return false
	}
	// An Event is in its object's namespace; one that says otherwise is
	// not trusted.
	if obj.Namespace != "" && obj.Namespace != ev.Namespace {
		return false
	}
	if obj.Name == "" || len(obj.Name) > maxNameLength || strings.ContainsAny(obj.Name, "/%") {
		return false
	}
	if obj.Kind == "Pod" && ev.Type == corev1.EventTypeNormal && ev.Reason == ReasonScheduled {
		// The local scheduler recorded the pod's own Scheduled Event (to
		// the virtual node); which provider node took it is the
		// provider's business, and not reflecting it saves a write per
		// offloaded pod.
		return false
	}
	return boundReason(ev.Reason) != ""
}

// Occurrences returns how often and when last the provider saw ev: core/v1
// count and lastTimestamp, or the series of an events.k8s.io/v1 Event
// (what the provider's own controllers record).
func Occurrences(ev *corev1.Event) (int32, time.Time) {
	count := max(ev.Count, 1)
	last := ev.LastTimestamp.Time
	if ev.FirstTimestamp.After(last) {
		last = ev.FirstTimestamp.Time
	}
	if ev.EventTime.After(last) {
		last = ev.EventTime.Time
	}
	if s := ev.Series; s != nil {
		count = max(count, s.Count)
		if s.LastObservedTime.After(last) {
			last = s.LastObservedTime.Time
		}
	}
	return count, last.Truncate(time.Second)
}

// BoundMessage is the local Event's message: "<provider>: " then the
// provider's message, valid UTF-8 without control characters but newlines
// and tabs, cut to MaxMessageBytes in all.
func BoundMessage(providerID, msg string) string {
	prefix := providerID + ": "
	return prefix + truncate(clean(msg, "\n\t"), MaxMessageBytes-len(prefix))
}

// boundReason keeps a reason that is a short word of letters and digits
// (what reasons are), "" otherwise.
func boundReason(reason string) string {
	if reason == "" || len(reason) > MaxReasonLength {
		return ""
	}
	for _, c := range reason {
		if c > unicode.MaxASCII || !(unicode.IsLetter(c) || unicode.IsDigit(c) || c == '_' || c == '-' || c == '.') {
			return ""
		}
	}
	return reason
}

// clean makes s valid UTF-8 and drops control characters except those in
// keep.
func clean(s, keep string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(c rune) rune {
		if unicode.IsControl(c) && !strings.ContainsRune(keep, c) {
			return -1
		}
		return c
	}, s)
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// mark is what was reflected last of one provider Event.
type mark struct {
	count int32
	last  time.Time
}

// reflected is what was reflected of each provider Event, by local pod: the
// state that keeps the reflector from writing twice. It holds only the
// Events of pods that exist (ForgetPod).
type reflected struct {
	mu    sync.Mutex
	byPod map[string]map[types.UID]mark
}

func newReflected() *reflected { return &reflected{byPod: map[string]map[types.UID]mark{}} }

// advanced reports whether r is new or its count or last time advanced
// since what was reflected.
func (s *reflected) advanced(r Reflection) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.byPod[r.Pod][r.UID]
	return !ok || r.Count > m.count || r.Last.After(m.last)
}

// set records that count and last of provider Event uid about pod were
// reflected; it never goes back.
func (s *reflected) set(pod string, uid types.UID, count int32, last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs := s.byPod[pod]
	if evs == nil {
		evs = map[types.UID]mark{}
		s.byPod[pod] = evs
	}
	m := evs[uid]
	evs[uid] = mark{count: max(m.count, count), last: later(m.last, last)}
}

// forgetEvent forgets provider Event uid about pod (deleted on the
// provider: it never comes back).
func (s *reflected) forgetEvent(pod string, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byPod[pod], uid)
	if len(s.byPod[pod]) == 0 {
		delete(s.byPod, pod)
	}
}

// forgetPod forgets every Event about pod.
func (s *reflected) forgetPod(pod string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byPod, pod)
}

// size is the number of provider Events remembered.
func (s *reflected) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, evs := range s.byPod {
		n += len(evs)
	}
	return n
}

// seed records what the local Events of this reflector's source say was
// reflected (their annotations). Events without valid annotations are
// skipped.
func (s *reflected) seed(events []corev1.Event) {
	for i := range events {
		ev := &events[i]
		uid := ev.Annotations[AnnotationProviderEventUID]
		count, err := strconv.ParseInt(ev.Annotations[AnnotationProviderEventCount], 10, 32)
		if uid == "" || err != nil || ev.InvolvedObject.Name == "" {
			continue
		}
		last, err := time.Parse(time.RFC3339, ev.Annotations[AnnotationProviderEventLast])
		if err != nil {
			continue
		}
		s.set(ev.Namespace+"/"+ev.InvolvedObject.Name, types.UID(uid), int32(count), last)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
