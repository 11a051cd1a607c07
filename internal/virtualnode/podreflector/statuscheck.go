package podreflector

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The provider is trusted to run the pod, not to decide anything else about
// it here: what it reports is checked and bounded before it reaches the
// local pod (TranslateStatus). Every value refused, truncated or replaced is
// a StatusProblem, reported as a Warning Event on the local pod once per
// distinct problem (Reflector.reportProblems).
//
//   - Pod IPs: each must be an IP address, a unicast one, inside the
//     provider's pod CIDR in this cluster's view (the PodIPTranslator
//     decides, see netview.View.PodIP), at most one per family; a refused
//     address is not published.
//   - Conditions: only the kubelet's (PodReadyToStartContainers,
//     Initialized, ContainersReady, Ready), the first of each type, with
//     status True, False or Unknown. Every other type (readiness gates,
//     DisruptionTarget, annex.dev/Offloaded, ...) comes from the local pod
//     only.
//   - Container statuses: only for containers of the local pod's spec, one
//     per name, init containers in spec order and the others by name (what
//     a kubelet writes). Of each only the name, state, last state,
//     readiness, started, restart count (not negative), image, image ID and
//     container ID are taken; a container the local pod saw terminated that
//     may not restart stays terminated (the API server refuses the write
//     otherwise).
//   - Sizes: reasons at most maxReasonLen characters and a CamelCase token
//     (or dropped), messages at most maxMessageLen bytes (truncated), image,
//     image ID and container ID at most maxImageLen bytes (or dropped).
//   - Times: none more than maxClockSkew in the future.
//   - Phase: one of Kubernetes' pod phases.
const (
	maxReasonLen  = 128
	maxMessageLen = 4 << 10
	maxImageLen   = 512
	maxClockSkew  = 2 * time.Minute
	// maxPodIPCandidates bounds the addresses looked at (podIP and
	// podIPs): a pod has at most one per family.
	maxPodIPCandidates = 4
	// maxProblemsPerStatus bounds the problems one translation lists; the
	// rest are counted in one last problem.
	maxProblemsPerStatus = 32
	// maxProblemValueLen bounds a refused value as quoted in a problem.
	maxProblemValueLen = 64
)

// ReasonProviderStatusRefused is the reason of the Warning Event recorded
// on a local pod when part of its provider's status was refused, truncated
// or replaced. Its note starts with RuleProviderStatus.
const ReasonProviderStatusRefused = "ProviderStatusRefused"

// RuleProviderStatus names the rule in the notes of those Events.
const RuleProviderStatus = "annex-provider-status"

// reasonPattern is what a reason must look like: a CamelCase token, as the
// kubelet and metav1.Condition write them.
var reasonPattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// ignoredRemoteConditions are the conditions a provider's pod legitimately
// has that mean nothing here: they are left out without a problem. Every
// other non-kubelet condition a provider reports is a problem.
var ignoredRemoteConditions = []corev1.PodConditionType{
	corev1.PodScheduled,
	corev1.DisruptionTarget,
	corev1.PodResizePending,
	corev1.PodResizeInProgress,
	// A provider that offloads the pod further (its own virtual node).
	ConditionOffloaded,
}

// StatusProblem is part of a provider's status that was refused, truncated
// or replaced.
type StatusProblem struct {
	// Field is the field of the ShadowPod's status, e.g. "status.podIPs[1]".
	Field string
	// Value is the value refused, bounded; empty for a size or a count.
	Value string
	// Why says what is wrong and what was done instead.
	Why string
}

func (p StatusProblem) String() string {
	if p.Value == "" {
		return p.Field + " " + p.Why
	}
	return fmt.Sprintf("%s %q %s", p.Field, p.Value, p.Why)
}

// key identifies the problem among those of one pod: the same field with
// the same value is reported once.
func (p StatusProblem) key() string { return p.Field + "\x00" + p.Value }

// statusCheck collects the problems of one translation.
type statusCheck struct {
	now      time.Time // zero: times are not checked
	problems []StatusProblem
	dropped  int
}

func (c *statusCheck) refuse(field, value, why string) {
	if len(c.problems) >= maxProblemsPerStatus {
		c.dropped++
		return
	}
	c.problems = append(c.problems, StatusProblem{Field: field, Value: clip(value, maxProblemValueLen), Why: why})
}

// result returns the problems, with one for those left out.
func (c *statusCheck) result() []StatusProblem {
	if c.dropped > 0 {
		return append(c.problems, StatusProblem{Field: "status",
			Why: fmt.Sprintf("has %d more problems than listed", c.dropped)})
	}
	return c.problems
}

// clip returns s cut to at most n bytes at a rune boundary, as valid UTF-8.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// reason returns s when it is a valid reason, "" otherwise.
func (c *statusCheck) reason(field, s string) string {
	if s == "" {
		return ""
	}
	if len(s) > maxReasonLen {
		c.refuse(field, "", fmt.Sprintf("is longer than %d characters: dropped", maxReasonLen))
		return ""
	}
	if !reasonPattern.MatchString(s) {
		c.refuse(field, s, "is not a CamelCase reason: dropped")
		return ""
	}
	return s
}

// message returns s truncated to maxMessageLen bytes.
func (c *statusCheck) message(field, s string) string {
	out := clip(s, maxMessageLen)
	if len(s) > maxMessageLen {
		c.refuse(field, "", fmt.Sprintf("is longer than %d bytes: truncated", maxMessageLen))
	}
	return out
}

// identifier returns s (an image, image ID or container ID) when it is
// short enough, "" otherwise.
func (c *statusCheck) identifier(field, s string) string {
	if len(s) > maxImageLen {
		c.refuse(field, "", fmt.Sprintf("is longer than %d bytes: dropped", maxImageLen))
		return ""
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// time returns t, or ok false when it lies too far in the future.
func (c *statusCheck) time(field string, t metav1.Time) (metav1.Time, bool) {
	if c.now.IsZero() || t.IsZero() || !t.After(c.now.Add(maxClockSkew)) {
		return t, true
	}
	c.refuse(field, t.UTC().Format(time.RFC3339), fmt.Sprintf("is more than %s in the future", maxClockSkew))
	return metav1.Time{}, false
}

// timeOrNow returns t, or now when t lies too far in the future.
func (c *statusCheck) timeOrNow(field string, t metav1.Time) metav1.Time {
	if out, ok := c.time(field, t); ok {
		return out
	}
	return metav1.NewTime(c.now).Rfc3339Copy()
}

// phase returns the provider's phase when it is one (Pending when it has
// none yet), fallback (or Pending) otherwise.
func (c *statusCheck) phase(p, fallback corev1.PodPhase) corev1.PodPhase {
	switch p {
	case corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown:
		return p
	case "":
		return corev1.PodPending
	}
	c.refuse("status.phase", string(p), "is not a pod phase: ignored")
	if fallback == "" {
		return corev1.PodPending
	}
	return fallback
}

// podIPs returns the addresses of the provider's pod that may be published
// here, translated by ips: podIP first, then podIPs, at most one per
// family.
func (c *statusCheck) podIPs(providerID, podIP string, podIPs []corev1.PodIP, ips PodIPTranslator) []corev1.PodIP {
	type candidate struct{ field, ip string }
	var cands []candidate
	if podIP != "" {
		cands = append(cands, candidate{"status.podIP", podIP})
	}
	for i, p := range podIPs {
		cands = append(cands, candidate{fmt.Sprintf("status.podIPs[%d].ip", i), p.IP})
	}
	var out []corev1.PodIP
	var families []bool // Is4 of each address in out
	seen := map[string]bool{}
	for i, cand := range cands {
		if seen[cand.ip] {
			continue
		}
		seen[cand.ip] = true
		if i >= maxPodIPCandidates {
			c.refuse("status.podIPs", "", fmt.Sprintf("has more than %d addresses: the rest are not published", maxPodIPCandidates))
			break
		}
		addr, err := netip.ParseAddr(cand.ip)
		if err != nil || addr.Zone() != "" {
			c.refuse(cand.field, cand.ip, "is not an IP address: not published")
			continue
		}
		if !addr.IsGlobalUnicast() || addr.Is4In6() {
			c.refuse(cand.field, cand.ip, "cannot be a pod's address (loopback, link-local, multicast, unspecified, broadcast or IPv4-mapped): not published")
			continue
		}
		t, err := ips(providerID, addr.String())
		if err != nil {
			c.refuse(cand.field, cand.ip, err.Error()+": not published")
			continue
		}
		view, err := netip.ParseAddr(t)
		if err != nil || view.Zone() != "" || !view.IsGlobalUnicast() || view.Is4In6() {
			c.refuse(cand.field, cand.ip, fmt.Sprintf("translates to %q, not a pod address: not published", clip(t, maxProblemValueLen)))
			continue
		}
		if j := slices.Index(families, view.Is4()); j >= 0 {
			if out[j].IP != view.String() {
				c.refuse(cand.field, cand.ip, "is a second address of its family (a pod has at most one per family): not published")
			}
			continue
		}
		out = append(out, corev1.PodIP{IP: view.String()})
		families = append(families, view.Is4())
	}
	return out
}

// conditions returns the provider's kubelet conditions that may be taken.
func (c *statusCheck) conditions(remote []corev1.PodCondition) []corev1.PodCondition {
	var out []corev1.PodCondition
	for i := range remote {
		rc := &remote[i]
		field := fmt.Sprintf("status.conditions[%d]", i)
		switch {
		case isKubeletCondition(rc.Type):
		case slices.Contains(ignoredRemoteConditions, rc.Type):
			continue
		default:
			c.refuse(field+".type", string(rc.Type), "is not a kubelet condition: the local pod's own is kept")
			continue
		}
		if slices.ContainsFunc(out, func(o corev1.PodCondition) bool { return o.Type == rc.Type }) {
			c.refuse(field+".type", string(rc.Type), "appears twice: the first one is used")
			continue
		}
		switch rc.Status {
		case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
		default:
			c.refuse(field+".status", string(rc.Status), "is not True, False or Unknown: the condition is ignored")
			continue
		}
		// observedGeneration is the provider's pod's generation: it says
		// nothing about the local pod's, and is left out.
		out = append(out, corev1.PodCondition{
			Type:               rc.Type,
			Status:             rc.Status,
			Reason:             c.reason(field+".reason", rc.Reason),
			Message:            c.message(field+".message", rc.Message),
			LastProbeTime:      c.timeOrNow(field+".lastProbeTime", rc.LastProbeTime),
			LastTransitionTime: c.timeOrNow(field+".lastTransitionTime", rc.LastTransitionTime),
		})
	}
	return out
}

// containerStatuses returns the provider's statuses of the containers in
// spec: one per container, in spec order when init, by name otherwise.
// prev are the local pod's statuses of those containers, restart its
// restartPolicy.
func (c *statusCheck) containerStatuses(field string, remote []corev1.ContainerStatus, spec []corev1.Container,
	prev []corev1.ContainerStatus, restart corev1.RestartPolicy, init bool) []corev1.ContainerStatus {
	if len(remote) == 0 {
		return nil
	}
	taken := make(map[string]int, len(spec)) // container name -> index in remote
	for i := range remote {
		name := remote[i].Name
		switch {
		case !slices.ContainsFunc(spec, func(s corev1.Container) bool { return s.Name == name }):
			c.refuse(fmt.Sprintf("%s[%d].name", field, i), name, "is not a container of the pod: its status is dropped")
		case hasKey(taken, name):
			c.refuse(fmt.Sprintf("%s[%d].name", field, i), name, "appears twice: the first status is used")
		default:
			taken[name] = i
		}
	}
	out := make([]corev1.ContainerStatus, 0, len(taken))
	for i := range spec {
		j, ok := taken[spec[i].Name]
		if !ok {
			continue
		}
		f := fmt.Sprintf("%s[%d]", field, j)
		s := c.containerStatus(f, &remote[j], &spec[i])
		if old := findStatus(prev, spec[i].Name); old != nil && old.State.Terminated != nil && s.State.Terminated == nil &&
			!mayRestart(&spec[i], restart, init, old.State.Terminated.ExitCode) {
			c.refuse(f+".state", "", "leaves the terminated state although the container does not restart: the local status is kept")
			s = *old.DeepCopy()
		}
		out = append(out, s)
	}
	if !init {
		slices.SortFunc(out, func(a, b corev1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) })
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func hasKey(m map[string]int, k string) bool {
	_, ok := m[k]
	return ok
}

func findStatus(in []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range in {
		if in[i].Name == name {
			return &in[i]
		}
	}
	return nil
}

// mayRestart says whether container ctr, terminated with exitCode, may
// run again, as the API server decides it before accepting a status where
// it does (conservatively: with restart rules the API server decides).
func mayRestart(ctr *corev1.Container, restart corev1.RestartPolicy, init bool, exitCode int32) bool {
	if len(ctr.RestartPolicyRules) > 0 {
		return true
	}
	p := restart
	switch {
	case ctr.RestartPolicy != nil:
		p = corev1.RestartPolicy(*ctr.RestartPolicy)
	case init && p == corev1.RestartPolicyAlways:
		p = corev1.RestartPolicyOnFailure // init containers run to completion
	}
	switch p {
	case corev1.RestartPolicyAlways:
		return true
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return false
	}
}

// containerStatus returns the fields of in that the local pod takes.
func (c *statusCheck) containerStatus(field string, in *corev1.ContainerStatus, spec *corev1.Container) corev1.ContainerStatus {
	out := corev1.ContainerStatus{
		Name:                 spec.Name,
		State:                c.state(field+".state", in.State),
		LastTerminationState: c.state(field+".lastState", in.LastTerminationState),
		Ready:                in.Ready,
		RestartCount:         in.RestartCount,
		Image:                c.identifier(field+".image", in.Image),
		ImageID:              c.identifier(field+".imageID", in.ImageID),
		ContainerID:          c.identifier(field+".containerID", in.ContainerID),
	}
	if in.Started != nil {
		out.Started = new(*in.Started)
	}
	if out.RestartCount < 0 {
		c.refuse(field+".restartCount", fmt.Sprint(in.RestartCount), "is negative: 0 is used")
		out.RestartCount = 0
	}
	if out.Image == "" && in.Image != "" {
		out.Image = spec.Image
	}
	return out
}

// state returns one state of in (the most advanced when it has several),
// bounded.
func (c *statusCheck) state(field string, in corev1.ContainerState) corev1.ContainerState {
	n := 0
	for _, set := range []bool{in.Waiting != nil, in.Running != nil, in.Terminated != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		c.refuse(field, "", "has more than one state: the most advanced is used")
	}
	var out corev1.ContainerState
	switch {
	case in.Terminated != nil:
		t := in.Terminated
		out.Terminated = &corev1.ContainerStateTerminated{
			ExitCode:    t.ExitCode,
			Signal:      t.Signal,
			Reason:      c.reason(field+".terminated.reason", t.Reason),
			Message:     c.message(field+".terminated.message", t.Message),
			StartedAt:   c.timeOrNow(field+".terminated.startedAt", t.StartedAt),
			FinishedAt:  c.timeOrNow(field+".terminated.finishedAt", t.FinishedAt),
			ContainerID: c.identifier(field+".terminated.containerID", t.ContainerID),
		}
	case in.Running != nil:
		out.Running = &corev1.ContainerStateRunning{StartedAt: c.timeOrNow(field+".running.startedAt", in.Running.StartedAt)}
	case in.Waiting != nil:
		out.Waiting = &corev1.ContainerStateWaiting{
			Reason:  c.reason(field+".waiting.reason", in.Waiting.Reason),
			Message: c.message(field+".waiting.message", in.Waiting.Message),
		}
	}
	return out
}
