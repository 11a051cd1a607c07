package podreflector

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// The provider's pod CIDR in its own network and in this cluster's view.
var (
	providerPodCIDR = netip.MustParsePrefix("10.246.0.0/16")
	providerView    = netip.MustParsePrefix("100.64.0.0/16")
)

// remapTranslator maps providerPodCIDR to providerView and refuses every
// other address, as netview does for a remapped link.
func remapTranslator(t testing.TB) PodIPTranslator {
	return func(provider, ip string) (string, error) {
		if provider != "beta" {
			t.Errorf("translator called for provider %q", provider)
		}
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			t.Errorf("translator called with %q, not an address", ip)
			return "", err
		}
		if !providerPodCIDR.Contains(addr) {
			return "", fmt.Errorf("is outside the pod CIDR %s of beta", providerPodCIDR)
		}
		b := addr.As4()
		v := providerView.Addr().As4()
		return netip.AddrFrom4([4]byte{v[0], v[1], b[2], b[3]}).String(), nil
	}
}

func podSpec(containers ...string) corev1.PodSpec {
	var spec corev1.PodSpec
	for _, c := range containers {
		spec.Containers = append(spec.Containers, corev1.Container{Name: c, Image: "img-" + c})
	}
	return spec
}

func running(name string, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Ready: true, RestartCount: restarts, Image: "img-" + name, Started: new(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t0}}}
}

var lbGate = corev1.PodConditionType("example.com/lb-ready")

// honestLocal is the local pod of the rule tests: containers b and a (in
// that order), an init container, a readiness gate that is True, and a
// DisruptionTarget condition set by this cluster.
func honestLocal() *corev1.Pod {
	spec := podSpec("b", "a")
	spec.InitContainers = []corev1.Container{{Name: "init", Image: "img-init"}}
	spec.RestartPolicy = corev1.RestartPolicyAlways
	spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: lbGate}}
	return &corev1.Pod{Spec: spec, Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodScheduled, corev1.ConditionTrue, "", t0),
			cond(lbGate, corev1.ConditionTrue, "LoadBalancerReady", t0),
			cond(corev1.DisruptionTarget, corev1.ConditionFalse, "NotDisrupted", t0),
		}}}
}

func completed(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Image: "img-" + name, Started: new(false),
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: t0, FinishedAt: t0}}}
}

// honestRemote is what an honest provider reports for honestLocal.
func honestRemote() offloadingv1alpha1.ShadowPodStatus {
	return offloadingv1alpha1.ShadowPodStatus{
		Phase: corev1.PodRunning, PodIP: "10.246.0.7", PodIPs: []corev1.PodIP{{IP: "10.246.0.7"}}, StartTime: &t0,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, corev1.ConditionTrue, "", t0),
			cond(corev1.PodInitialized, corev1.ConditionTrue, "", t0),
			cond(corev1.ContainersReady, corev1.ConditionTrue, "", t1),
			cond(corev1.PodReady, corev1.ConditionTrue, "", t1),
			cond(corev1.PodScheduled, corev1.ConditionTrue, "", t0),
		},
		InitContainerStatuses: []corev1.ContainerStatus{completed("init")},
		ContainerStatuses:     []corev1.ContainerStatus{running("a", 0), running("b", 2)},
	}
}

// honestWant is the local status TranslateStatus makes of honestRemote.
func honestWant() corev1.PodStatus {
	return corev1.PodStatus{
		Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBestEffort,
		HostIP: "127.0.0.1", HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP: "100.64.0.7", PodIPs: []corev1.PodIP{{IP: "100.64.0.7"}}, StartTime: &t0,
		InitContainerStatuses: []corev1.ContainerStatus{completed("init")},
		ContainerStatuses:     []corev1.ContainerStatus{running("a", 0), running("b", 2)},
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, corev1.ConditionTrue, "", t0),
			cond(corev1.PodInitialized, corev1.ConditionTrue, "", t0),
			cond(corev1.ContainersReady, corev1.ConditionTrue, "", t1),
			cond(corev1.PodReady, corev1.ConditionTrue, "", t1),
			cond(corev1.PodScheduled, corev1.ConditionTrue, "", t0),
			cond(lbGate, corev1.ConditionTrue, "LoadBalancerReady", t0),
			cond(corev1.DisruptionTarget, corev1.ConditionFalse, "NotDisrupted", t0),
			offloaded(now),
		},
	}
}

func setCondition(conds []corev1.PodCondition, c corev1.PodCondition) {
	for i := range conds {
		if conds[i].Type == c.Type {
			conds[i] = c
			return
		}
	}
	panic("no condition " + c.Type)
}

// statusRuleTest applies one rule of statuscheck.go to an otherwise
// honest status: honestLocal changed by local, honestRemote by remote, and
// honestWant by want.
type statusRuleTest struct {
	name   string
	local  func(*corev1.Pod)
	remote func(*offloadingv1alpha1.ShadowPodStatus)
	want   func(*corev1.PodStatus)
	// problems are the fields (and values) reported.
	problems []StatusProblem
}

var long = strings.Repeat("x", maxMessageLen+100)

var statusRuleTests = []statusRuleTest{{
	name: "honest status: taken as it is",
}, {
	name: "pod IP outside the provider's pod CIDR: not published",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.PodIP, s.PodIPs = "10.96.0.1", []corev1.PodIP{{IP: "10.96.0.1"}}
	},
	want: func(s *corev1.PodStatus) { s.PodIP, s.PodIPs = "", nil },
	problems: []StatusProblem{{Field: "status.podIP", Value: "10.96.0.1",
		Why: "is outside the pod CIDR 10.246.0.0/16 of beta: not published"}},
}, {
	name: "unparsable pod IP: not published",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.PodIP, s.PodIPs = "10.246.0.300", []corev1.PodIP{{IP: "10.246.0.300"}}
	},
	want: func(s *corev1.PodStatus) { s.PodIP, s.PodIPs = "", nil },
	// The same value again under podIPs is not reported twice.
	problems: []StatusProblem{{Field: "status.podIP", Value: "10.246.0.300", Why: "is not an IP address: not published"}},
}, {
	name:   "loopback pod IP: not published",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) { s.PodIP, s.PodIPs = "127.0.0.1", nil },
	want:   func(s *corev1.PodStatus) { s.PodIP, s.PodIPs = "", nil },
	problems: []StatusProblem{{Field: "status.podIP", Value: "127.0.0.1",
		Why: "cannot be a pod's address (loopback, link-local, multicast, unspecified, broadcast or IPv4-mapped): not published"}},
}, {
	name: "podIPs: the one outside dropped, the valid one kept; podIP made consistent",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.PodIP = ""
		s.PodIPs = []corev1.PodIP{{IP: "fd00::1"}, {IP: "10.246.0.8"}, {IP: "10.246.0.9"}}
	},
	want: func(s *corev1.PodStatus) { s.PodIP, s.PodIPs = "100.64.0.8", []corev1.PodIP{{IP: "100.64.0.8"}} },
	problems: []StatusProblem{
		{Field: "status.podIPs[0].ip", Value: "fd00::1", Why: "is outside the pod CIDR 10.246.0.0/16 of beta: not published"},
		{Field: "status.podIPs[2].ip", Value: "10.246.0.9", Why: "is a second address of its family (a pod has at most one per family): not published"},
	},
}, {
	name: "a remote readiness-gate condition is ignored: the local one stays",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.Conditions = append(s.Conditions, cond(lbGate, corev1.ConditionFalse, "Hijacked", t1))
	},
	problems: []StatusProblem{{Field: "status.conditions[5].type", Value: string(lbGate),
		Why: "is not a kubelet condition: the local pod's own is kept"}},
}, {
	name: "a remote readiness gate cannot make the pod Ready",
	local: func(p *corev1.Pod) {
		setCondition(p.Status.Conditions, cond(lbGate, corev1.ConditionFalse, "Waiting", t0))
	},
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.Conditions = append(s.Conditions, cond(lbGate, corev1.ConditionTrue, "", t1))
	},
	want: func(s *corev1.PodStatus) {
		setCondition(s.Conditions, cond(lbGate, corev1.ConditionFalse, "Waiting", t0))
		setCondition(s.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse,
			Reason: ReasonReadinessGatesNotReady, LastTransitionTime: now,
			Message: `the pod runs on provider beta but its readiness gate "example.com/lb-ready" is not True`})
	},
	problems: []StatusProblem{{Field: "status.conditions[5].type", Value: string(lbGate),
		Why: "is not a kubelet condition: the local pod's own is kept"}},
}, {
	name: "DisruptionTarget from the provider is ignored",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.Conditions = append(s.Conditions, cond(corev1.DisruptionTarget, corev1.ConditionTrue, "PreemptionByScheduler", t1))
	},
}, {
	name: "the Offloaded condition is the consumer's",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.Conditions = append(s.Conditions, corev1.PodCondition{Type: ConditionOffloaded, Status: corev1.ConditionFalse})
	},
}, {
	name: "an unknown condition type is refused",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.Conditions = append(s.Conditions, cond("example.com/anything", corev1.ConditionTrue, "", t1))
	},
	problems: []StatusProblem{{Field: "status.conditions[5].type", Value: "example.com/anything",
		Why: "is not a kubelet condition: the local pod's own is kept"}},
}, {
	name: "a duplicate Ready condition: the first one is used",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.Conditions = append(s.Conditions, cond(corev1.PodReady, corev1.ConditionFalse, "", t1))
	},
	problems: []StatusProblem{{Field: "status.conditions[5].type", Value: "Ready", Why: "appears twice: the first one is used"}},
}, {
	name: "a condition status that is not True, False or Unknown",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.Conditions[3].Status = "Yes"
	},
	want: func(s *corev1.PodStatus) {
		s.Conditions = slices.DeleteFunc(s.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
	},
	problems: []StatusProblem{{Field: "status.conditions[3].status", Value: "Yes",
		Why: "is not True, False or Unknown: the condition is ignored"}},
}, {
	name: "observedGeneration of a remote condition is left out",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.Conditions[3].ObservedGeneration = -5
	},
}, {
	name:   "oversize message: truncated",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) { s.Message = long },
	want:   func(s *corev1.PodStatus) { s.Message = long[:maxMessageLen] },
	problems: []StatusProblem{{Field: "status.message",
		Why: "is longer than 4096 bytes: truncated"}},
}, {
	name:   "a message is truncated at a rune boundary",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) { s.Message = strings.Repeat("é", maxMessageLen) },
	want:   func(s *corev1.PodStatus) { s.Message = strings.Repeat("é", maxMessageLen/2) },
	problems: []StatusProblem{{Field: "status.message",
		Why: "is longer than 4096 bytes: truncated"}},
}, {
	name:     "oversize reason: dropped",
	remote:   func(s *offloadingv1alpha1.ShadowPodStatus) { s.Reason = strings.Repeat("R", maxReasonLen+1) },
	problems: []StatusProblem{{Field: "status.reason", Why: "is longer than 128 characters: dropped"}},
}, {
	name:     "a reason that is not CamelCase: dropped",
	remote:   func(s *offloadingv1alpha1.ShadowPodStatus) { s.Reason = "rm -rf /" },
	problems: []StatusProblem{{Field: "status.reason", Value: "rm -rf /", Why: "is not a CamelCase reason: dropped"}},
}, {
	name:   "a valid reason is kept",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) { s.Reason = "Evicted" },
	want:   func(s *corev1.PodStatus) { s.Reason = "Evicted" },
}, {
	name:     "an unknown phase: the local one stays",
	remote:   func(s *offloadingv1alpha1.ShadowPodStatus) { s.Phase = "Hacked" },
	want:     func(s *corev1.PodStatus) { s.Phase = corev1.PodPending },
	problems: []StatusProblem{{Field: "status.phase", Value: "Hacked", Why: "is not a pod phase: ignored"}},
}, {
	name: "container status of an unknown container: dropped",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.ContainerStatuses = append(s.ContainerStatuses, running("sidecar-from-nowhere", 0))
	},
	problems: []StatusProblem{{Field: "status.containerStatuses[2].name", Value: "sidecar-from-nowhere",
		Why: "is not a container of the pod: its status is dropped"}},
}, {
	name: "duplicate container statuses: the first is used, sorted by name as a kubelet does",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.ContainerStatuses = []corev1.ContainerStatus{running("b", 2), running("b", 7), running("a", 0)}
	},
	problems: []StatusProblem{{Field: "status.containerStatuses[1].name", Value: "b", Why: "appears twice: the first status is used"}},
}, {
	name: "a missing container status stays missing",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.ContainerStatuses = s.ContainerStatuses[1:]
	},
	want: func(s *corev1.PodStatus) { s.ContainerStatuses = s.ContainerStatuses[1:] },
}, {
	name: "init container statuses: only those of the spec",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.InitContainerStatuses = append(s.InitContainerStatuses, completed("a"))
	},
	problems: []StatusProblem{{Field: "status.initContainerStatuses[1].name", Value: "a",
		Why: "is not a container of the pod: its status is dropped"}},
}, {
	name:     "negative restart count: 0",
	remote:   func(s *offloadingv1alpha1.ShadowPodStatus) { s.ContainerStatuses[1].RestartCount = -3 },
	want:     func(s *corev1.PodStatus) { s.ContainerStatuses[1].RestartCount = 0 },
	problems: []StatusProblem{{Field: "status.containerStatuses[1].restartCount", Value: "-3", Why: "is negative: 0 is used"}},
}, {
	name: "oversize image and image ID: the spec's image, no image ID",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.ContainerStatuses[0].Image = long
		s.ContainerStatuses[0].ImageID = long
	},
	problems: []StatusProblem{
		{Field: "status.containerStatuses[0].image", Why: "is longer than 512 bytes: dropped"},
		{Field: "status.containerStatuses[0].imageID", Why: "is longer than 512 bytes: dropped"},
	},
}, {
	name: "container state reason and message bounded",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "not a reason", Message: long}}
	},
	want: func(s *corev1.PodStatus) {
		s.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Message: long[:maxMessageLen]}}
	},
	problems: []StatusProblem{
		{Field: "status.containerStatuses[0].state.waiting.reason", Value: "not a reason", Why: "is not a CamelCase reason: dropped"},
		{Field: "status.containerStatuses[0].state.waiting.message", Why: "is longer than 4096 bytes: truncated"},
	},
}, {
	name: "fields of a container status a kubelet's own cluster owns are left out",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.ContainerStatuses[0].User = &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: -1}}
		s.ContainerStatuses[0].VolumeMounts = []corev1.VolumeMountStatus{{Name: "x", MountPath: "/x"}}
	},
}, {
	name: "several states: the most advanced",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	},
	problems: []StatusProblem{{Field: "status.containerStatuses[0].state", Why: "has more than one state: the most advanced is used"}},
}, {
	name: "a terminated container of a restartPolicy Never pod stays terminated",
	local: func(p *corev1.Pod) {
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Status.ContainerStatuses = []corev1.ContainerStatus{completed("a")}
	},
	want: func(s *corev1.PodStatus) { s.ContainerStatuses[0] = completed("a") },
	problems: []StatusProblem{{Field: "status.containerStatuses[0].state",
		Why: "leaves the terminated state although the container does not restart: the local status is kept"}},
}, {
	name: "a terminated container of a restartPolicy Always pod may run again",
	local: func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{completed("a")}
	},
}, {
	name: "start time in the future: refused",
	local: func(p *corev1.Pod) {
		p.Status.StartTime = &t0
	},
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.StartTime = &metav1.Time{Time: now.Add(time.Hour)}
	},
	problems: []StatusProblem{{Field: "status.startTime", Value: "2025-01-01T12:00:00Z", Why: "is more than 2m0s in the future"}},
}, {
	name: "start time a little in the future (clock skew): kept",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.StartTime = &metav1.Time{Time: now.Add(time.Minute)}
	},
	want: func(s *corev1.PodStatus) { s.StartTime = &metav1.Time{Time: now.Add(time.Minute)} },
}, {
	name: "condition transition in the future: now",
	remote: func(s *offloadingv1alpha1.ShadowPodStatus) {
		s.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(24 * time.Hour))
	},
	want: func(s *corev1.PodStatus) { s.Conditions[0].LastTransitionTime = now },
	problems: []StatusProblem{{Field: "status.conditions[0].lastTransitionTime", Value: "2025-01-02T11:00:00Z",
		Why: "is more than 2m0s in the future"}},
}}

// inputs returns the local pod and the ShadowPod of tt.
func (tt statusRuleTest) inputs() (*corev1.Pod, *offloadingv1alpha1.ShadowPod) {
	local := honestLocal()
	if tt.local != nil {
		tt.local(local)
	}
	remote := honestRemote()
	if tt.remote != nil {
		tt.remote(&remote)
	}
	return local, shadow(remote)
}

// TestTranslateStatusRules: each rule of statuscheck.go, applied to an
// otherwise honest status.
func TestTranslateStatusRules(t *testing.T) {
	for _, tt := range statusRuleTests {
		t.Run(tt.name, func(t *testing.T) {
			local, sp := tt.inputs()
			before := local.DeepCopy()
			want := honestWant()
			if local.Status.StartTime != nil {
				want.StartTime = local.Status.StartTime // kept when the provider's is refused
			}
			if tt.want != nil {
				tt.want(&want)
			}
			got, problems := TranslateStatus(local, sp, sp.Status, StatusContext{ProviderID: "beta", NodeIP: "127.0.0.1",
				IPs: remapTranslator(t), Now: now})
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.problems, problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, local); diff != "" {
				t.Errorf("TranslateStatus modified the local pod:\n%s", diff)
			}
		})
	}
}

func TestTranslateStatusManyProblems(t *testing.T) {
	remote := honestRemote()
	for i := range 100 {
		remote.ContainerStatuses = append(remote.ContainerStatuses, running(fmt.Sprintf("x%d", i), 0))
	}
	_, problems := TranslateStatus(honestLocal(), shadow(remote), remote, StatusContext{ProviderID: "beta", IPs: remapTranslator(t), Now: now})
	if len(problems) != maxProblemsPerStatus+1 {
		t.Fatalf("%d problems, want %d", len(problems), maxProblemsPerStatus+1)
	}
	if want := (StatusProblem{Field: "status", Why: "has 68 more problems than listed"}); problems[maxProblemsPerStatus] != want {
		t.Errorf("last problem %+v, want %+v", problems[maxProblemsPerStatus], want)
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"},
		{"a\xffb", 5, "a\uFFFDb"},
	} {
		if got := clip(tc.in, tc.n); got != tc.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// FuzzTranslateStatus feeds TranslateStatus any ShadowPod status (as JSON)
// and checks what the local pod may never get from a provider.
func FuzzTranslateStatus(f *testing.F) {
	for _, s := range hostileStatuses() {
		b, err := json.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"podIP":"10.246.0.1%eth0","podIPs":[{"ip":"0.0.0.0"},{"ip":"255.255.255.255"},{"ip":"fe80::1"}]}`))
	f.Add([]byte(`{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"9999-01-01T00:00:00Z"}]}`))

	f.Fuzz(func(t *testing.T, data []byte) {
		var remote offloadingv1alpha1.ShadowPodStatus
		if err := json.Unmarshal(data, &remote); err != nil {
			return
		}
		local := honestLocal()
		setCondition(local.Status.Conditions, cond(lbGate, corev1.ConditionFalse, "Waiting", t0))
		got, problems := TranslateStatus(local, shadow(remote), remote, StatusContext{ProviderID: "beta", NodeIP: "127.0.0.1",
			IPs: remapTranslator(t), Now: now})
		if err := checkTranslated(local, &got); err != nil {
			t.Fatalf("%v\nremote: %s\nproblems: %v", err, data, problems)
		}
		if len(problems) > maxProblemsPerStatus+1 {
			t.Fatalf("%d problems", len(problems))
		}
	})
}

// hostileStatuses are statuses a lying provider may report.
func hostileStatuses() []offloadingv1alpha1.ShadowPodStatus {
	return []offloadingv1alpha1.ShadowPodStatus{honestRemote(), {}, {
		Phase: "Hacked", Reason: "not a reason", Message: strings.Repeat("m", 5000),
		PodIP: "192.168.0.1", PodIPs: []corev1.PodIP{{IP: "fd00::1"}, {IP: "::ffff:10.246.0.1"}, {IP: "10.246.0.1"}, {IP: "10.246.0.2"}},
		StartTime: &metav1.Time{Time: now.Add(time.Hour)},
		Conditions: []corev1.PodCondition{
			cond(lbGate, corev1.ConditionTrue, "", t0), cond(corev1.DisruptionTarget, corev1.ConditionTrue, "", t0),
			cond(corev1.PodReady, "Yes", "", t0), cond(corev1.PodReady, corev1.ConditionTrue, "", t0),
			cond(ConditionOffloaded, corev1.ConditionFalse, "", t0),
		},
		ContainerStatuses: []corev1.ContainerStatus{running("z", -1), running("a", 1), running("a", 2),
			{Name: "b", Image: strings.Repeat("i", 600), State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: strings.Repeat("W", 200)}, Terminated: &corev1.ContainerStateTerminated{}}}},
		InitContainerStatuses: []corev1.ContainerStatus{running("init", 0), running("b", 0)},
	}, {
		Phase: corev1.PodRunning, PodIP: "10.246.0.7", PodIPs: []corev1.PodIP{{IP: "10.246.0.8"}, {IP: "10.246.0.7"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, ObservedGeneration: -1,
			LastTransitionTime: metav1.NewTime(now.Add(48 * time.Hour)), Reason: "Bad Reason", Message: long}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "a", RestartCount: -7, Started: new(true),
			User:         &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: -1, GID: -1}},
			VolumeMounts: []corev1.VolumeMountStatus{{Name: "nope", MountPath: "/nope"}},
			State:        corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: -1, Reason: long, Message: long, ContainerID: long}},
		}},
	}}
}

// checkTranslated checks what a translated status must satisfy whatever
// the provider said.
func checkTranslated(local *corev1.Pod, got *corev1.PodStatus) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	// Addresses: only in the provider's pod CIDR (this cluster's view),
	// consistent, one per family.
	if (got.PodIP == "") != (len(got.PodIPs) == 0) || (got.PodIP != "" && got.PodIP != got.PodIPs[0].IP) {
		fail("podIP %q and podIPs %v disagree", got.PodIP, got.PodIPs)
	}
	if len(got.PodIPs) > 1 {
		fail("%d pod IPs for one pod CIDR", len(got.PodIPs))
	}
	for _, ip := range got.PodIPs {
		addr, err := netip.ParseAddr(ip.IP)
		if err != nil || !providerView.Contains(addr) || addr.String() != ip.IP {
			fail("published pod IP %q outside %s (or not canonical)", ip.IP, providerView)
		}
	}

	// Conditions: the consumer's own are the local pod's, kubelet ones
	// are unique, nothing else appears.
	seen := map[corev1.PodConditionType]bool{}
	for _, c := range got.Conditions {
		if seen[c.Type] {
			fail("condition %s twice", c.Type)
		}
		seen[c.Type] = true
		if c.ObservedGeneration < 0 {
			fail("condition %s observedGeneration %d", c.Type, c.ObservedGeneration)
		}
		if len(c.Reason) > maxReasonLen || len(c.Message) > maxMessageLen {
			fail("condition %s reason or message too long", c.Type)
		}
		if c.LastTransitionTime.After(now.Add(maxClockSkew)) || c.LastProbeTime.After(now.Add(maxClockSkew)) {
			fail("condition %s time in the future", c.Type)
		}
		switch {
		case c.Type == ConditionOffloaded:
			if c.Status != corev1.ConditionTrue || c.Reason != ReasonShadowPodCreated {
				fail("Offloaded %+v", c)
			}
		case c.Type == corev1.PodReady && c.Reason == ReasonReadinessGatesNotReady:
		case isKubeletCondition(c.Type):
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				fail("Ready True while the readiness gate is False")
			}
		default:
			lc := getPodCondition(&local.Status, c.Type)
			if lc == nil || !cmp.Equal(*lc, c) {
				fail("condition %s does not come from the local pod: %+v", c.Type, c)
			}
		}
	}
	for _, lc := range local.Status.Conditions {
		if !isKubeletCondition(lc.Type) && !seen[lc.Type] {
			fail("local condition %s lost", lc.Type)
		}
	}

	// Sizes and container statuses.
	if len(got.Reason) > maxReasonLen || (got.Reason != "" && !reasonPattern.MatchString(got.Reason)) {
		fail("reason %q", got.Reason)
	}
	if len(got.Message) > maxMessageLen {
		fail("message of %d bytes", len(got.Message))
	}
	switch got.Phase {
	case corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown:
	default:
		fail("phase %q", got.Phase)
	}
	if got.StartTime != nil && got.StartTime.After(now.Add(maxClockSkew)) {
		fail("start time %s in the future", got.StartTime)
	}
	if got.QOSClass != local.Status.QOSClass {
		fail("QoS class changed")
	}
	checkContainers := func(field string, statuses []corev1.ContainerStatus, spec []corev1.Container) {
		if len(statuses) > len(spec) {
			fail("%s: %d statuses for %d containers", field, len(statuses), len(spec))
		}
		names := map[string]bool{}
		for _, s := range statuses {
			if names[s.Name] || !slices.ContainsFunc(spec, func(c corev1.Container) bool { return c.Name == s.Name }) {
				fail("%s: status of %q (unknown or twice)", field, s.Name)
			}
			names[s.Name] = true
			if s.RestartCount < 0 || len(s.Image) > maxImageLen || len(s.ImageID) > maxImageLen || len(s.ContainerID) > maxImageLen {
				fail("%s: %q restartCount or identifiers out of bounds", field, s.Name)
			}
			if s.User != nil || s.Resources != nil || s.AllocatedResources != nil || s.VolumeMounts != nil {
				fail("%s: %q carries fields the consumer does not take", field, s.Name)
			}
			for _, st := range []corev1.ContainerState{s.State, s.LastTerminationState} {
				n := 0
				if w := st.Waiting; w != nil {
					n++
					if len(w.Reason) > maxReasonLen || len(w.Message) > maxMessageLen {
						fail("%s: %q waiting reason or message too long", field, s.Name)
					}
				}
				if st.Running != nil {
					n++
				}
				if tm := st.Terminated; tm != nil {
					n++
					if len(tm.Reason) > maxReasonLen || len(tm.Message) > maxMessageLen || len(tm.ContainerID) > maxImageLen {
						fail("%s: %q terminated reason, message or ID too long", field, s.Name)
					}
				}
				if n > 1 {
					fail("%s: %q has %d states", field, s.Name, n)
				}
			}
		}
	}
	checkContainers("initContainerStatuses", got.InitContainerStatuses, local.Spec.InitContainers)
	checkContainers("containerStatuses", got.ContainerStatuses, local.Spec.Containers)
	return errors.Join(errs...)
}
