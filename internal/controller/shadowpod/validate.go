package shadowpod

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/controller/resourceslice"
)

// SafeCapabilities are the Linux capabilities a consumer's container may add
// without --allow-privileged-shadowpods: the container runtime's default set,
// as in the Pod Security Standards' baseline profile.
var SafeCapabilities = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}

// SafeSysctls are the namespaced sysctls a consumer's pod may set without
// --allow-privileged-shadowpods (the baseline profile's list).
var SafeSysctls = []string{
	"kernel.shm_rmid_forced",
	"net.ipv4.ip_local_port_range",
	"net.ipv4.ip_local_reserved_ports",
	"net.ipv4.ip_unprivileged_port_start",
	"net.ipv4.ping_group_range",
	"net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes",
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_syncookies",
}

// safeSELinuxTypes are the SELinux types a pod may ask for (baseline).
var safeSELinuxTypes = []string{"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}

// appArmorAnnotationPrefix is the deprecated per-container AppArmor annotation.
const appArmorAnnotationPrefix = "container.apparmor.security.beta.kubernetes.io/"

// hint is appended to every refusal that --allow-privileged-shadowpods lifts.
const hint = "a consumer's pod may not do this on this provider (it is started without --allow-privileged-shadowpods)"

// Validate checks a ShadowPod's spec against what a consumer, an untrusted
// tenant, may run on this provider. It returns every violation, each naming
// the field (spec.pod...) and the rule.
//
// Always refused: spec.pod.nodeName (the provider's scheduler places pods).
// Refused unless allowPrivileged: host namespaces (hostNetwork, hostPID,
// hostIPC), hostPath volumes, host ports, privileged containers,
// allowPrivilegeEscalation: true, capabilities added beyond
// SafeCapabilities, Windows host-process containers, an unmasked /proc,
// unconfined seccomp or AppArmor profiles (also through the deprecated
// AppArmor annotations in spec.podAnnotations), custom SELinux user, role or
// type, and sysctls outside SafeSysctls. These are the Pod Security
// Standards' baseline rules.
func Validate(spec *offloadingv1alpha1.ShadowPodSpec, allowPrivileged bool) field.ErrorList {
	root := field.NewPath("spec", "pod")
	pod := &spec.Pod
	var errs field.ErrorList
	if pod.NodeName != "" {
		errs = append(errs, field.Forbidden(root.Child("nodeName"), "must not be set: the provider's scheduler places the pod"))
	}
	errs = append(errs, validateQuantities(root, pod)...)
	if allowPrivileged {
		return errs
	}

	if pod.HostNetwork {
		errs = append(errs, field.Forbidden(root.Child("hostNetwork"), "sharing the node's network namespace: "+hint))
	}
	if pod.HostPID {
		errs = append(errs, field.Forbidden(root.Child("hostPID"), "sharing the node's process namespace: "+hint))
	}
	if pod.HostIPC {
		errs = append(errs, field.Forbidden(root.Child("hostIPC"), "sharing the node's IPC namespace: "+hint))
	}
	for i, v := range pod.Volumes {
		if v.HostPath != nil {
			errs = append(errs, field.Forbidden(root.Child("volumes").Index(i).Child("hostPath"), "mounting a directory of the node: "+hint))
		}
	}
	if sc := pod.SecurityContext; sc != nil {
		p := root.Child("securityContext")
		errs = append(errs, checkProfiles(p, sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions, sc.WindowsOptions)...)
		for i, s := range sc.Sysctls {
			if !slices.Contains(SafeSysctls, s.Name) {
				errs = append(errs, field.Forbidden(p.Child("sysctls").Index(i).Child("name"),
					fmt.Sprintf("sysctl %q is not in the safe set (%s): %s", s.Name, strings.Join(SafeSysctls, ", "), hint)))
			}
		}
	}
	for i := range pod.InitContainers {
		errs = append(errs, checkContainer(root.Child("initContainers").Index(i), &pod.InitContainers[i])...)
	}
	for i := range pod.Containers {
		errs = append(errs, checkContainer(root.Child("containers").Index(i), &pod.Containers[i])...)
	}
	for i := range pod.EphemeralContainers {
		c := corev1.Container(pod.EphemeralContainers[i].EphemeralContainerCommon)
		errs = append(errs, checkContainer(root.Child("ephemeralContainers").Index(i), &c)...)
	}
	for _, k := range sortedKeys(spec.PodAnnotations) {
		if strings.HasPrefix(k, appArmorAnnotationPrefix) && spec.PodAnnotations[k] == "unconfined" {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "podAnnotations").Key(k), "an unconfined AppArmor profile: "+hint))
		}
	}
	return errs
}

// validateQuantities checks every resource quantity of pod, before any is
// counted against the consumer's grant: each request and limit of its
// containers, init containers and pod-level resources must be a
// non-negative quantity of at most resourceslice.MaxQuantity. The API server
// refuses a negative request too, but only when the pod is created, after
// the agent has counted it: a negative request counted as admitted would
// lower the consumer's usage for every admission after it. spec.overhead is
// never the tenant's to set: the RuntimeClass admission of the provider sets
// it, from a RuntimeClass the provider allows. Nor is spec.resourceClaims:
// devices allocated through dynamic resource allocation are not counted by
// any grant.
func validateQuantities(root *field.Path, pod *corev1.PodSpec) field.ErrorList {
	var errs field.ErrorList
	check := func(p *field.Path, l corev1.ResourceList) {
		for _, name := range sortedNames(l) {
			q := l[name]
			if why := resourceslice.CheckQuantity(q); why != "" {
				errs = append(errs, field.Invalid(p.Key(string(name)), q.String(), why))
			}
		}
	}
	for _, cs := range []struct {
		path       *field.Path
		containers []corev1.Container
	}{{root.Child("initContainers"), pod.InitContainers}, {root.Child("containers"), pod.Containers}} {
		for i := range cs.containers {
			r := &cs.containers[i].Resources
			check(cs.path.Index(i).Child("resources", "requests"), r.Requests)
			check(cs.path.Index(i).Child("resources", "limits"), r.Limits)
		}
	}
	if pod.Resources != nil {
		check(root.Child("resources", "requests"), pod.Resources.Requests)
		check(root.Child("resources", "limits"), pod.Resources.Limits)
	}
	if len(pod.ResourceClaims) > 0 {
		errs = append(errs, field.Forbidden(root.Child("resourceClaims"), "dynamic resource allocation is not part of the grant: a tenant's pod may not claim devices on this provider"))
	}
	if len(pod.Overhead) > 0 {
		errs = append(errs, field.Forbidden(root.Child("overhead"), "must not be set: the provider's RuntimeClass admission sets it"))
	}
	return errs
}

// checkContainer checks one container's ports and security context.
func checkContainer(p *field.Path, c *corev1.Container) field.ErrorList {
	var errs field.ErrorList
	for i, port := range c.Ports {
		if port.HostPort != 0 {
			errs = append(errs, field.Forbidden(p.Child("ports").Index(i).Child("hostPort"), "binding a port of the node: "+hint))
		}
	}
	sc := c.SecurityContext
	if sc == nil {
		return errs
	}
	p = p.Child("securityContext")
	if sc.Privileged != nil && *sc.Privileged {
		errs = append(errs, field.Forbidden(p.Child("privileged"), "a privileged container: "+hint))
	}
	if sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation {
		errs = append(errs, field.Forbidden(p.Child("allowPrivilegeEscalation"), "must not be true: "+hint))
	}
	if sc.Capabilities != nil {
		for i, capability := range sc.Capabilities.Add {
			name := strings.TrimPrefix(strings.ToUpper(string(capability)), "CAP_")
			if !slices.Contains(SafeCapabilities, name) {
				errs = append(errs, field.Forbidden(p.Child("capabilities", "add").Index(i),
					fmt.Sprintf("capability %s is not in the safe set (%s): %s", capability, strings.Join(SafeCapabilities, ", "), hint)))
			}
		}
	}
	if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount {
		errs = append(errs, field.Forbidden(p.Child("procMount"), "an unmasked /proc: "+hint))
	}
	errs = append(errs, checkProfiles(p, sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions, sc.WindowsOptions)...)
	return errs
}

// checkProfiles checks the confinement settings shared by pod and container
// security contexts.
func checkProfiles(p *field.Path, seccomp *corev1.SeccompProfile, apparmor *corev1.AppArmorProfile, selinux *corev1.SELinuxOptions, windows *corev1.WindowsSecurityContextOptions) field.ErrorList {
	var errs field.ErrorList
	if seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeUnconfined {
		errs = append(errs, field.Forbidden(p.Child("seccompProfile", "type"), "an unconfined seccomp profile: "+hint))
	}
	if apparmor != nil && apparmor.Type == corev1.AppArmorProfileTypeUnconfined {
		errs = append(errs, field.Forbidden(p.Child("appArmorProfile", "type"), "an unconfined AppArmor profile: "+hint))
	}
	if selinux != nil {
		if !slices.Contains(safeSELinuxTypes, selinux.Type) {
			errs = append(errs, field.Forbidden(p.Child("seLinuxOptions", "type"), fmt.Sprintf("SELinux type %q: %s", selinux.Type, hint)))
		}
		if selinux.User != "" {
			errs = append(errs, field.Forbidden(p.Child("seLinuxOptions", "user"), "a custom SELinux user: "+hint))
		}
		if selinux.Role != "" {
			errs = append(errs, field.Forbidden(p.Child("seLinuxOptions", "role"), "a custom SELinux role: "+hint))
		}
	}
	if windows != nil && windows.HostProcess != nil && *windows.HostProcess {
		errs = append(errs, field.Forbidden(p.Child("windowsOptions", "hostProcess"), "a Windows host-process container: "+hint))
	}
	return errs
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
