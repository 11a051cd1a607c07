package podreflector

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestPodDependencies(t *testing.T) {
	cmRef := func(name string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: name} }
	spec := &corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "a", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: cmRef("settings")}}},
			{Name: "b", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls"}}},
			{Name: "c", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "maybe", Optional: ptr.To(true)}}},
			{Name: "d", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: cmRef("kube-root-ca.crt")}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: cmRef("projected")}},
			}}}},
			{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		InitContainers: []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: cmRef("init-env")}}}}},
		Containers: []corev1.Container{{Name: "c",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: cmRef("settings")}}},
			Env: []corev1.EnvVar{
				{Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: cmRef("db"), Key: "password"}}},
				{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: cmRef("opt"), Key: "k", Optional: ptr.To(true)}}},
				{Name: "C", Value: "plain"},
			}}},
		ImagePullSecrets: []corev1.LocalObjectReference{cmRef("registry")},
	}
	want := []dependency{
		{"ConfigMap", "kube-root-ca.crt"}, {"ConfigMap", "settings"},
		{"Secret", "db"}, {"Secret", "init-env"}, {"Secret", "projected"}, {"Secret", "tls"},
	}
	if diff := cmp.Diff(want, podDependencies(spec), cmp.AllowUnexported(dependency{})); diff != "" {
		t.Errorf("dependencies (-want +got):\n%s", diff)
	}
}
