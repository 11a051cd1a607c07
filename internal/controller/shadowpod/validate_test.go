package shadowpod

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

func TestValidate(t *testing.T) {
	base := func(mutate ...func(*offloadingv1alpha1.ShadowPodSpec)) *offloadingv1alpha1.ShadowPodSpec {
		s := &offloadingv1alpha1.ShadowPodSpec{Pod: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
			Containers:     []corev1.Container{{Name: "app", Image: "nginx"}},
		}}
		for _, m := range mutate {
			m(s)
		}
		return s
	}
	app := func(f func(*corev1.Container)) func(*offloadingv1alpha1.ShadowPodSpec) {
		return func(s *offloadingv1alpha1.ShadowPodSpec) { f(&s.Pod.Containers[0]) }
	}
	appSC := func(f func(*corev1.SecurityContext)) func(*offloadingv1alpha1.ShadowPodSpec) {
		return app(func(c *corev1.Container) {
			if c.SecurityContext == nil {
				c.SecurityContext = &corev1.SecurityContext{}
			}
			f(c.SecurityContext)
		})
	}
	podSC := func(f func(*corev1.PodSecurityContext)) func(*offloadingv1alpha1.ShadowPodSpec) {
		return func(s *offloadingv1alpha1.ShadowPodSpec) {
			s.Pod.SecurityContext = &corev1.PodSecurityContext{}
			f(s.Pod.SecurityContext)
		}
	}
	const h = ": " + hint
	tests := []struct {
		name            string
		spec            *offloadingv1alpha1.ShadowPodSpec
		allowPrivileged bool
		want            []string
	}{
		{name: "plain pod", spec: base()},
		{name: "safe settings", spec: base(
			appSC(func(sc *corev1.SecurityContext) {
				sc.Privileged = ptr.To(false)
				sc.AllowPrivilegeEscalation = ptr.To(false)
				sc.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE", "CAP_CHOWN", "kill"}, Drop: []corev1.Capability{"ALL"}}
				sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
				sc.SELinuxOptions = &corev1.SELinuxOptions{Type: "container_t", Level: "s0:c1,c2"}
			}),
			podSC(func(sc *corev1.PodSecurityContext) {
				sc.Sysctls = []corev1.Sysctl{{Name: "net.ipv4.ip_local_port_range", Value: "1024 65535"}}
				sc.RunAsNonRoot = ptr.To(true)
			}),
			func(s *offloadingv1alpha1.ShadowPodSpec) {
				s.Pod.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
				s.Pod.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}}
				s.PodAnnotations = map[string]string{appArmorAnnotationPrefix + "app": "runtime/default"}
			})},
		{name: "nodeName is always refused", allowPrivileged: true,
			spec: base(func(s *offloadingv1alpha1.ShadowPodSpec) { s.Pod.NodeName = "node-1" }),
			want: []string{"spec.pod.nodeName: Forbidden: must not be set: the provider's scheduler places the pod"}},
		{name: "host namespaces",
			spec: base(func(s *offloadingv1alpha1.ShadowPodSpec) {
				s.Pod.HostNetwork, s.Pod.HostPID, s.Pod.HostIPC = true, true, true
			}),
			want: []string{
				"spec.pod.hostNetwork: Forbidden: sharing the node's network namespace" + h,
				"spec.pod.hostPID: Forbidden: sharing the node's process namespace" + h,
				"spec.pod.hostIPC: Forbidden: sharing the node's IPC namespace" + h,
			}},
		{name: "host namespaces allowed by --allow-privileged-shadowpods", allowPrivileged: true,
			spec: base(func(s *offloadingv1alpha1.ShadowPodSpec) { s.Pod.HostNetwork = true })},
		{name: "hostPath volume",
			spec: base(func(s *offloadingv1alpha1.ShadowPodSpec) {
				s.Pod.Volumes = []corev1.Volume{
					{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}},
				}
			}),
			want: []string{"spec.pod.volumes[1].hostPath: Forbidden: mounting a directory of the node" + h}},
		{name: "host port",
			spec: base(app(func(c *corev1.Container) { c.Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}} })),
			want: []string{"spec.pod.containers[0].ports[0].hostPort: Forbidden: binding a port of the node" + h}},
		{name: "privileged init container",
			spec: base(func(s *offloadingv1alpha1.ShadowPodSpec) {
				s.Pod.InitContainers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			}),
			want: []string{"spec.pod.initContainers[0].securityContext.privileged: Forbidden: a privileged container" + h}},
		{name: "privileged ephemeral container",
			spec: base(func(s *offloadingv1alpha1.ShadowPodSpec) {
				s.Pod.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
					Name: "debug", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}
			}),
			want: []string{"spec.pod.ephemeralContainers[0].securityContext.privileged: Forbidden: a privileged container" + h}},
		{name: "privilege escalation and capabilities",
			spec: base(appSC(func(sc *corev1.SecurityContext) {
				sc.AllowPrivilegeEscalation = ptr.To(true)
				sc.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"CHOWN", "SYS_ADMIN", "CAP_NET_ADMIN", "ALL"}}
			})),
			want: []string{
				"spec.pod.containers[0].securityContext.allowPrivilegeEscalation: Forbidden: must not be true" + h,
				"spec.pod.containers[0].securityContext.capabilities.add[1]: Forbidden: capability SYS_ADMIN is not in the safe set (AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT)" + h,
				"spec.pod.containers[0].securityContext.capabilities.add[2]: Forbidden: capability CAP_NET_ADMIN is not in the safe set (AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT)" + h,
				"spec.pod.containers[0].securityContext.capabilities.add[3]: Forbidden: capability ALL is not in the safe set (AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT)" + h,
			}},
		{name: "unconfined profiles, unmasked proc, host process",
			spec: base(appSC(func(sc *corev1.SecurityContext) {
				sc.ProcMount = ptr.To(corev1.UnmaskedProcMount)
				sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
				sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
				sc.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
			})),
			want: []string{
				"spec.pod.containers[0].securityContext.procMount: Forbidden: an unmasked /proc" + h,
				"spec.pod.containers[0].securityContext.seccompProfile.type: Forbidden: an unconfined seccomp profile" + h,
				"spec.pod.containers[0].securityContext.appArmorProfile.type: Forbidden: an unconfined AppArmor profile" + h,
				"spec.pod.containers[0].securityContext.windowsOptions.hostProcess: Forbidden: a Windows host-process container" + h,
			}},
		{name: "pod security context: SELinux, seccomp, sysctls",
			spec: base(podSC(func(sc *corev1.PodSecurityContext) {
				sc.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t", User: "system_u", Role: "system_r"}
				sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
				sc.Sysctls = []corev1.Sysctl{{Name: "net.ipv4.tcp_syncookies", Value: "1"}, {Name: "kernel.msgmax", Value: "1"}}
			})),
			want: []string{
				"spec.pod.securityContext.seccompProfile.type: Forbidden: an unconfined seccomp profile" + h,
				`spec.pod.securityContext.seLinuxOptions.type: Forbidden: SELinux type "spc_t"` + h,
				"spec.pod.securityContext.seLinuxOptions.user: Forbidden: a custom SELinux user" + h,
				"spec.pod.securityContext.seLinuxOptions.role: Forbidden: a custom SELinux role" + h,
				`spec.pod.securityContext.sysctls[1].name: Forbidden: sysctl "kernel.msgmax" is not in the safe set (kernel.shm_rmid_forced, net.ipv4.ip_local_port_range, net.ipv4.ip_local_reserved_ports, net.ipv4.ip_unprivileged_port_start, net.ipv4.ping_group_range, net.ipv4.tcp_fin_timeout, net.ipv4.tcp_keepalive_intvl, net.ipv4.tcp_keepalive_probes, net.ipv4.tcp_keepalive_time, net.ipv4.tcp_syncookies)` + h,
			}},
		{name: "unconfined AppArmor annotation",
			spec: base(func(s *offloadingv1alpha1.ShadowPodSpec) {
				s.PodAnnotations = map[string]string{appArmorAnnotationPrefix + "app": "unconfined"}
			}),
			want: []string{"spec.podAnnotations[container.apparmor.security.beta.kubernetes.io/app]: Forbidden: an unconfined AppArmor profile" + h}},
		{name: "quantities: negative, over 1P, overhead; refused even with --allow-privileged-shadowpods", allowPrivileged: true,
			spec: base(func(s *offloadingv1alpha1.ShadowPodSpec) {
				s.Pod.InitContainers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("-1Gi")}
				s.Pod.Containers[0].Resources.Requests = corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("-500m"), corev1.ResourceMemory: resource.MustParse("1Gi"), "example.com/dev": resource.MustParse("2E")}
				s.Pod.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}}
				s.Pod.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
			}),
			want: []string{
				`spec.pod.initContainers[0].resources.limits[memory]: Invalid value: "-1Gi": is negative`,
				`spec.pod.containers[0].resources.requests[cpu]: Invalid value: "-500m": is negative`,
				`spec.pod.containers[0].resources.requests[example.com/dev]: Invalid value: "2E": is over 1P, the most any quantity may be`,
				`spec.pod.resources.requests[cpu]: Invalid value: "-1": is negative`,
				"spec.pod.overhead: Forbidden: must not be set: the provider's RuntimeClass admission sets it",
			}},
		{name: "quantities at the bounds", spec: base(app(func(c *corev1.Container) {
			c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0"), corev1.ResourceMemory: resource.MustParse("1P")}
		}))},
		{name: "everything allowed by --allow-privileged-shadowpods", allowPrivileged: true,
			spec: base(appSC(func(sc *corev1.SecurityContext) {
				sc.Privileged = ptr.To(true)
				sc.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}
			}), func(s *offloadingv1alpha1.ShadowPodSpec) {
				s.Pod.HostPID = true
				s.Pod.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
			})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range Validate(tc.spec, tc.allowPrivileged) {
				got = append(got, e.Error())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Validate() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodMetadata: a tenant's pod carries its keys without a domain and
// those of the allowed domains and their subdomains, never annex.dev's; the
// rest are reported.
func TestPodMetadata(t *testing.T) {
	r := New(nil, nil, Options{PodLabelDomains: DefaultPodLabelDomains, PodAnnotationDomains: []string{"example.com"}})
	sp := &offloadingv1alpha1.ShadowPod{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}, Spec: offloadingv1alpha1.ShadowPodSpec{
		PodLabels: map[string]string{
			"app": "web", "app.kubernetes.io/name": "web", "statefulset.kubernetes.io/pod-name": "web-1",
			"networking.example.org/role": "admin", "annex.dev/shadowpod": "other", "sub.helm.sh/chart": "x",
			"helm.sh.evil.io/chart": "x",
		},
		PodAnnotations: map[string]string{
			"note": "hi", "team.example.com/owner": "a", "k8s.v1.cni.cncf.io/networks": "macvlan",
			"cni.projectcalico.org/ipAddrs": `["10.0.0.1"]`, "sidecar.istio.io/inject": "true", "annex.dev/x": "y",
		},
	}}
	labels, annotations, dropped := r.podMetadata(sp)
	want := map[string]string{"app": "web", "app.kubernetes.io/name": "web", "statefulset.kubernetes.io/pod-name": "web-1",
		"sub.helm.sh/chart": "x", offloadingv1alpha1.LabelShadowPod: "web-1"}
	if diff := cmp.Diff(want, labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"note": "hi", "team.example.com/owner": "a"}, annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	wantDropped := []string{"label annex.dev/shadowpod", "label helm.sh.evil.io/chart", "label networking.example.org/role",
		"annotation annex.dev/x", "annotation cni.projectcalico.org/ipAddrs", "annotation k8s.v1.cni.cncf.io/networks", "annotation sidecar.istio.io/inject"}
	if diff := cmp.Diff(wantDropped, dropped); diff != "" {
		t.Errorf("dropped (-want +got):\n%s", diff)
	}
}
