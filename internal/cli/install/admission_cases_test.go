package install

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/virtualnode/podreflector"
)

// The cases of the tenant admission policies (charts/annex/templates/admission/tenant-*.yaml),
// shared by the CEL test (admission_test.go) and the test against a real API
// server (admission_integration_test.go).

// remoteNS is the remote namespace of consumer "c1" in the cases.
const remoteNS = "web-c1"

// Names of a PriorityClass and a RuntimeClass that exist on the provider
// (the integration test creates them: the API server refuses unknown ones
// before any policy runs).
const (
	testPriorityClass = "tenant-high"
	testRuntimeClass  = "gvisor"
)

// kwokPodSpec is the spec of a sandbox pod (nginx, no securityContext) as
// the provider's agent creates it: the consumer's pod after its own admission
// (the virtual-node toleration and node affinity of the annex-offloading
// policy, the DefaultTolerationSeconds tolerations, defaulted scheduler and
// priority), sanitized by the consumer's reflector exactly as a ShadowPod.
func kwokPodSpec() corev1.PodSpec {
	seconds, zero := int64(300), int32(0)
	local := corev1.PodSpec{
		NodeName:      "annex-prov",
		SchedulerName: corev1.DefaultSchedulerName,
		Priority:      &zero,
		Containers:    []corev1.Container{{Name: "nginx", Image: "nginx"}},
		Tolerations: []corev1.Toleration{
			{Key: corev1alpha1.TaintKeyVirtualNode, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &seconds},
			{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &seconds},
		},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: corev1alpha1.LabelRemoteClusterID, Operator: corev1.NodeSelectorOpIn, Values: []string{"prov"}}}}}}}},
	}
	return podreflector.SanitizePodSpec(&local, podreflector.NodeIdentity{Name: "annex-prov",
		Labels: map[string]string{corev1alpha1.LabelRemoteClusterID: "prov", "type": "virtual-node"}})
}

// podCase is a pod created in a remote namespace; want is "" when it is
// admitted, else text the refusal contains.
type podCase struct {
	name   string
	mutate func(*corev1.PodSpec)
	want   string
}

func tolerate(key string, op corev1.TolerationOperator) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) {
		s.Tolerations = append(s.Tolerations, corev1.Toleration{Key: key, Operator: op, Effect: corev1.TaintEffectNoSchedule})
	}
}

func nodeTerm(key string, fields bool) corev1.NodeSelectorTerm {
	r := []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{"x"}}}
	if fields {
		return corev1.NodeSelectorTerm{MatchFields: r}
	}
	return corev1.NodeSelectorTerm{MatchExpressions: r}
}

func requiredNodeAffinity(t corev1.NodeSelectorTerm) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{t}}}}
	}
}

func preferredNodeAffinity(t corev1.NodeSelectorTerm) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 10, Preference: t}}}}
	}
}

func podTerm(namespaces []string, selector *metav1.LabelSelector) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		TopologyKey: corev1.LabelHostname, Namespaces: namespaces, NamespaceSelector: selector}
}

func httpGet(host string) corev1.ProbeHandler {
	return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: host, Path: "/", Port: intstr.FromInt32(80)}}
}

func tcpSocket(host string) corev1.ProbeHandler {
	return corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: host, Port: intstr.FromInt32(80)}}
}

func podCases() []podCase {
	always := corev1.ContainerRestartPolicyAlways
	sidecar := func(s *corev1.PodSpec, set func(*corev1.Container)) {
		c := corev1.Container{Name: "proxy", Image: "envoy", RestartPolicy: &always}
		set(&c)
		s.InitContainers = append(s.InitContainers, c)
	}
	return []podCase{
		{name: "kwok sandbox pod", mutate: func(*corev1.PodSpec) {}},
		{name: "allowed nodeSelector", mutate: func(s *corev1.PodSpec) {
			s.NodeSelector = map[string]string{corev1.LabelOSStable: "linux", corev1.LabelTopologyZone: "a"}
		}},
		{name: "allowed required node affinity", mutate: requiredNodeAffinity(nodeTerm(corev1.LabelArchStable, false))},
		{name: "allowed preferred node affinity", mutate: preferredNodeAffinity(nodeTerm(corev1.LabelTopologyRegion, false))},
		{name: "default scheduler named", mutate: func(s *corev1.PodSpec) { s.SchedulerName = corev1.DefaultSchedulerName }},
		{name: "pod affinity in its own namespace", mutate: func(s *corev1.PodSpec) {
			s.Affinity = &corev1.Affinity{
				PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
					podTerm(nil, nil), podTerm([]string{remoteNS}, nil)}},
				PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
					{Weight: 1, PodAffinityTerm: podTerm(nil, nil)}}},
			}
		}},
		{name: "probes and hooks without a host", mutate: func(s *corev1.PodSpec) {
			c := &s.Containers[0]
			c.LivenessProbe = &corev1.Probe{ProbeHandler: httpGet("")}
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: tcpSocket("")}
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1}}}
		}},

		{name: "toleration of every taint", mutate: tolerate("", corev1.TolerationOpExists),
			want: `annex-tenant-pods: spec.tolerations: key(s) "" (tolerates every taint) not allowed`},
		{name: "toleration of the control plane", mutate: tolerate("node-role.kubernetes.io/control-plane", corev1.TolerationOpExists),
			want: `annex-tenant-pods: spec.tolerations: key(s) "node-role.kubernetes.io/control-plane" not allowed`},
		{name: "nodeSelector on a provider's label", mutate: func(s *corev1.PodSpec) {
			s.NodeSelector = map[string]string{corev1.LabelOSStable: "linux", "node-role.kubernetes.io/infra": ""}
		}, want: `annex-tenant-pods: spec.nodeSelector: key(s) "node-role.kubernetes.io/infra" not allowed`},
		{name: "required node affinity on hostname", mutate: requiredNodeAffinity(nodeTerm(corev1.LabelHostname, false)),
			want: `annex-tenant-pods: spec.affinity.nodeAffinity: key(s) "kubernetes.io/hostname" not allowed`},
		{name: "required node affinity on a node name", mutate: requiredNodeAffinity(nodeTerm(metav1.ObjectNameField, true)),
			want: `annex-tenant-pods: spec.affinity.nodeAffinity: key(s) "metadata.name" not allowed`},
		{name: "preferred node affinity on a provider's label", mutate: preferredNodeAffinity(nodeTerm("dedicated", false)),
			want: `annex-tenant-pods: spec.affinity.nodeAffinity: key(s) "dedicated" not allowed`},
		{name: "priority class", mutate: func(s *corev1.PodSpec) { s.PriorityClassName = testPriorityClass },
			want: `annex-tenant-pods: spec.priorityClassName "tenant-high" not allowed`},
		{name: "runtime class", mutate: func(s *corev1.PodSpec) { s.RuntimeClassName = new(testRuntimeClass) },
			want: `annex-tenant-pods: spec.runtimeClassName "gvisor" not allowed`},
		{name: "scheduler", mutate: func(s *corev1.PodSpec) { s.SchedulerName = "greedy" },
			want: `annex-tenant-pods: spec.schedulerName "greedy" not allowed`},
		{name: "pod affinity with a namespaceSelector", mutate: func(s *corev1.PodSpec) {
			s.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
				podTerm(nil, &metav1.LabelSelector{})}}}
		}, want: "annex-tenant-pods: spec.affinity: pod (anti-)affinity terms may not select pods in other namespaces"},
		{name: "preferred pod anti-affinity in kube-system", mutate: func(s *corev1.PodSpec) {
			s.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
				{Weight: 1, PodAffinityTerm: podTerm([]string{remoteNS, "kube-system"}, nil)}}}}
		}, want: "annex-tenant-pods: spec.affinity: pod (anti-)affinity terms may not select pods in other namespaces"},
		{name: "liveness probe to the metadata service", mutate: func(s *corev1.PodSpec) {
			s.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: httpGet("169.254.169.254")}
		}, want: "annex-tenant-pods: spec.containers[nginx].livenessProbe.httpGet.host 169.254.169.254: probes and lifecycle handlers may only call the pod itself"},
		{name: "readiness probe to a node port", mutate: func(s *corev1.PodSpec) {
			s.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: tcpSocket("10.0.0.1")}
		}, want: "annex-tenant-pods: spec.containers[nginx].readinessProbe.tcpSocket.host 10.0.0.1"},
		{name: "preStop hook to the API server", mutate: func(s *corev1.PodSpec) {
			s.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: httpGet("kubernetes.default").HTTPGet}}
		}, want: "annex-tenant-pods: spec.containers[nginx].lifecycle.preStop.httpGet.host kubernetes.default"},
		{name: "postStart hook with a host", mutate: func(s *corev1.PodSpec) {
			s.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{HTTPGet: httpGet("10.0.0.2").HTTPGet}}
		}, want: "annex-tenant-pods: spec.containers[nginx].lifecycle.postStart.httpGet.host 10.0.0.2"},
		{name: "volumes of the default types", mutate: func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}},
				{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
				{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
				{Name: "all", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}},
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}},
			}
		}},
		{name: "persistentVolumeClaim volume", mutate: func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		}, want: `annex-tenant-pods: spec.volumes: data (persistentVolumeClaim) not allowed by this provider (allowedVolumeTypes in ConfigMap annex-system/annex-provider-policy: "emptyDir,configMap,secret,projected,downwardAPI")`},
		{name: "ephemeral volume", mutate: func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
				VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}}}}
		}, want: "annex-tenant-pods: spec.volumes: scratch (ephemeral) not allowed"},
		{name: "NFS and CSI volumes beside an emptyDir", mutate: func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{
				{Name: "ok", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "10.0.0.9", Path: "/"}}},
				{Name: "inline", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "example.csi.k8s.io"}}},
			}
		}, want: "annex-tenant-pods: spec.volumes: share (nfs), inline (csi) not allowed"},
		{name: "hostPath volume", mutate: func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}, want: "annex-tenant-pods: spec.volumes: root (hostPath) not allowed"},
		{name: "startup probe of a sidecar init container", mutate: func(s *corev1.PodSpec) {
			sidecar(s, func(c *corev1.Container) { c.StartupProbe = &corev1.Probe{ProbeHandler: tcpSocket("10.0.0.3")} })
		}, want: "annex-tenant-pods: spec.initContainers[proxy].startupProbe.tcpSocket.host 10.0.0.3"},
	}
}

// serviceCase is a Service created (or, with update, updated from a valid
// ClusterIP Service) in a remote namespace. apiRefuses says the API
// server's own validation refuses it before any admission policy runs.
type serviceCase struct {
	name       string
	mutate     func(*corev1.Service)
	update     bool
	want       string
	apiRefuses bool
}

func clusterIPService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: remoteNS},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
	}
}

func serviceCases() []serviceCase {
	lb := func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer }
	return []serviceCase{
		{name: "ClusterIP", mutate: func(*corev1.Service) {}},
		{name: "type unset", mutate: func(s *corev1.Service) { s.Spec.Type = "" }},
		{name: "headless", mutate: func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }},
		{name: "ordinary annotations", mutate: func(s *corev1.Service) {
			s.Annotations = map[string]string{"prometheus.io/scrape": "true", "annex.dev/use-direct-connections": "true"}
		}},
		{name: "label update", update: true, mutate: func(s *corev1.Service) { s.Labels = map[string]string{"tier": "web"} }},

		{name: "NodePort", mutate: func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort },
			want: "annex-tenant-services: spec.type NodePort is not allowed"},
		{name: "LoadBalancer", mutate: lb, want: "annex-tenant-services: spec.type LoadBalancer is not allowed"},
		{name: "ExternalName", mutate: func(s *corev1.Service) {
			s.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "metadata.google.internal"}
		}, want: "annex-tenant-services: spec.type ExternalName is not allowed"},
		{name: "externalIPs", mutate: func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} },
			want: "annex-tenant-services: spec.externalIPs must be empty"},
		{name: "loadBalancerIP", mutate: func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.0.2.2" },
			want: "annex-tenant-services: spec.loadBalancerIP must not be set"},
		{name: "loadBalancerSourceRanges", mutate: func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"0.0.0.0/0"} },
			want: "annex-tenant-services: spec.loadBalancerSourceRanges must be empty", apiRefuses: true},
		{name: "loadBalancerClass", mutate: func(s *corev1.Service) { s.Spec.LoadBalancerClass = new("example.com/lb") },
			want: "annex-tenant-services: spec.loadBalancerClass must not be set", apiRefuses: true},
		{name: "externalName on a ClusterIP Service", mutate: func(s *corev1.Service) { s.Spec.ExternalName = "example.com" },
			want: "annex-tenant-services: spec.externalName must not be set"},
		{name: "externalTrafficPolicy Local", mutate: func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}, want: "annex-tenant-services: spec.externalTrafficPolicy must be unset or Cluster", apiRefuses: true},
		{name: "healthCheckNodePort", mutate: func(s *corev1.Service) { s.Spec.HealthCheckNodePort = 30001 },
			want: "annex-tenant-services: spec.healthCheckNodePort must not be set", apiRefuses: true},
		{name: "nodePort", mutate: func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30002 },
			want: "annex-tenant-services: spec.ports[].nodePort must not be set", apiRefuses: true},
		{name: "cloud load-balancer annotation", mutate: func(s *corev1.Service) {
			s.Annotations = map[string]string{"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}
		}, want: `annex-tenant-services: metadata.annotations "service.beta.kubernetes.io/aws-load-balancer-internal" not allowed`},
		{name: "LoadBalancer annotation in capitals", mutate: func(s *corev1.Service) {
			s.Annotations = map[string]string{"metallb.universe.tf/LoadBalancerIPs": "192.0.2.3"}
		}, want: `annex-tenant-services: metadata.annotations "metallb.universe.tf/LoadBalancerIPs" not allowed`},
		{name: "update to NodePort", update: true, mutate: func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort },
			want: "annex-tenant-services: spec.type NodePort is not allowed"},
		{name: "update adding externalIPs", update: true, mutate: func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.4"} },
			want: "annex-tenant-services: spec.externalIPs must be empty"},
	}
}

// shadowPodCase is a ShadowPod created (or, with update, updated from
// shadowPod()) in a remote namespace.
type shadowPodCase struct {
	name   string
	update bool
	mutate func(*offloadingv1alpha1.ShadowPod)
	want   string
}

func shadowPod(name string) *offloadingv1alpha1.ShadowPod {
	return &offloadingv1alpha1.ShadowPod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: remoteNS,
			Labels: map[string]string{corev1alpha1.LabelRemoteClusterID: "c1", corev1alpha1.LabelManagedBy: corev1alpha1.ManagedByAnnex}},
		Spec: offloadingv1alpha1.ShadowPodSpec{
			Pod:            kwokPodSpec(),
			PodLabels:      map[string]string{"app": "web"},
			PodAnnotations: map[string]string{"example.com/note": "hello"},
		},
	}
}

func shadowPodCases() []shadowPodCase {
	bigAnnotations := func(sp *offloadingv1alpha1.ShadowPod) {
		for i := range 5 {
			sp.Spec.PodAnnotations["example.com/big-"+string(rune('a'+i))] = strings.Repeat("x", 60<<10)
		}
	}
	return []shadowPodCase{
		{name: "created"},
		{name: "label update", update: true, mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.PodLabels["version"] = "v2"
			delete(sp.Spec.PodLabels, "app")
		}},
		{name: "annotation update", update: true, mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.PodAnnotations = map[string]string{"example.com/note": "bye", "kubernetes.io/description": "x"}
		}},
		{name: "metadata update", update: true, mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Labels["extra"] = "1"
		}},

		{name: "image changed", update: true, mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.Pod.Containers[0].Image = "evil"
		}, want: "annex-tenant-shadowpods: spec.pod is immutable"},
		{name: "toleration added", update: true, mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.Pod.Tolerations = append(sp.Spec.Pod.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
		}, want: "annex-tenant-shadowpods: spec.pod is immutable"},
		{name: "requests lowered", update: true, mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.Pod.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m")}
		}, want: "annex-tenant-shadowpods: spec.pod is immutable"},
		{name: "bad label key", mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.PodLabels["bad key!"] = "x"
		}, want: `annex-tenant-shadowpods: spec.podLabels: key "bad key!" is not a valid label key`},
		{name: "label name too long", update: true, mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.PodLabels["example.com/"+strings.Repeat("n", 64)] = "x"
		}, want: "annex-tenant-shadowpods: spec.podLabels: key \"example.com/nnnn"},
		{name: "label value too long", update: true, mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.PodLabels["app"] = strings.Repeat("v", 64)
		}, want: `annex-tenant-shadowpods: spec.podLabels["app"] is not a valid label value`},
		{name: "bad annotation key", mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.PodAnnotations["Example.com/x"] = "y"
		}, want: `annex-tenant-shadowpods: spec.podAnnotations: key "Example.com/x" is not a valid annotation key`},
		{name: "quantities at the bounds", mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.Pod.Containers[0].Resources = corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0"), corev1.ResourceMemory: resource.MustParse("1Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1P")}}
		}},
		{name: "negative cpu request", mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.Pod.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}
		}, want: "annex-tenant-shadowpods: spec.pod.containers[nginx].resources.requests[cpu] -1: every request and limit must be a quantity of at least 0 and at most 1P"},
		{name: "init container limit over 1P", mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.Pod.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"example.com/dev": resource.MustParse("2E")}}}}
		}, want: "annex-tenant-shadowpods: spec.pod.initContainers[init].resources.limits[example.com/dev] 2E"},
		{name: "negative pod-level request", mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.Pod.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("-1Gi")}}
		}, want: "annex-tenant-shadowpods: spec.pod.resources.requests[memory] -1Gi"},
		{name: "resource claims", mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.Pod.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: new("gpu")}}
		}, want: "annex-tenant-shadowpods: spec.pod.resourceClaims must be empty"},
		{name: "overhead", mutate: func(sp *offloadingv1alpha1.ShadowPod) {
			sp.Spec.Pod.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}
		}, want: "annex-tenant-shadowpods: spec.pod.overhead must not be set"},
		{name: "annotations over 256 KiB", update: true, mutate: bigAnnotations,
			want: "annex-tenant-shadowpods: spec.podAnnotations are 307"},
	}
}
