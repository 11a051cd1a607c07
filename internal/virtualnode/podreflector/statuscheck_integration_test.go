package podreflector

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
	"github.com/annexhq/annex/internal/localcluster"
	"github.com/annexhq/annex/internal/localcluster/clustertest"
)

// TestTranslatedStatusAccepted writes what TranslateStatus makes of every
// rule test's and every hostile status into pods of a real API server: a
// lying provider must never produce a status this cluster refuses (the
// status queue would retry it forever).
func TestTranslatedStatusAccepted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := clustertest.Start(ctx, t, localcluster.Options{Name: "consumer"})
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Pods of a namespace are refused until its default ServiceAccount
	// exists.
	const ns = "default"
	for {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no default ServiceAccount")
		case <-time.After(200 * time.Millisecond):
		}
	}
	sc := StatusContext{ProviderID: "beta", NodeIP: "127.0.0.1", IPs: remapTranslator(t), Now: metav1.NewTime(time.Now()).Rfc3339Copy()}

	type input struct {
		name   string
		local  *corev1.Pod
		shadow *offloadingv1alpha1.ShadowPod
	}
	var inputs []input
	for _, tt := range statusRuleTests {
		local, sp := tt.inputs()
		inputs = append(inputs, input{tt.name, local, sp})
	}
	for i, s := range hostileStatuses() {
		for _, policy := range []corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyNever} {
			local := honestLocal()
			local.Spec.RestartPolicy = policy
			local.Status.ContainerStatuses = []corev1.ContainerStatus{completed("a"), completed("b")}
			inputs = append(inputs, input{fmt.Sprintf("hostile status %d, restartPolicy %s", i, policy), local, shadow(s)})
		}
	}
	for i, in := range inputs {
		t.Run(in.name, func(t *testing.T) {
			pod := in.local.DeepCopy()
			pod.Name, pod.Namespace = fmt.Sprintf("p%d", i), ns
			pod.Spec.NodeName = "annex-beta" // no such node: nobody else writes its status
			created, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			// The local pod's status before the provider's is reflected.
			created.Status = in.local.Status
			created.Status.QOSClass = ""
			created.Status.StartTime = nil
			created, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
			if err != nil {
				t.Fatalf("initial status: %v", err)
			}
			got, problems := TranslateStatus(created, in.shadow, in.shadow.Status, sc)
			created.Status = got
			if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
				t.Errorf("the API server refused the translated status: %v\nproblems: %v", err, problems)
			}
		})
	}
}
