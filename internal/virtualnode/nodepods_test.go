package virtualnode

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
)

func TestNodePods(t *testing.T) {
	pod := func(ns, name, node string, lbls map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}, Spec: corev1.PodSpec{NodeName: node}}
	}
	indexer := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{nodeIndex: byNodeName})
	for _, p := range []*corev1.Pod{
		pod("a", "mine", "annex-beta", map[string]string{"app": "web"}),
		pod("a", "mine-too", "annex-beta", nil),
		pod("b", "mine", "annex-beta", map[string]string{"app": "web"}),
		pod("a", "elsewhere", "worker-1", map[string]string{"app": "web"}),
		pod("a", "unbound", "", nil),
	} {
		if err := indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	l := nodePods{indexer: indexer, node: "annex-beta"}
	names := func(pods []*corev1.Pod, err error) []string {
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range pods {
			out = append(out, p.Namespace+"/"+p.Name)
		}
		slices.Sort(out)
		return out
	}
	web := labels.SelectorFromSet(labels.Set{"app": "web"})
	for _, tc := range []struct {
		name string
		got  []string
		want []string
	}{
		{"all the node's pods", names(l.List(labels.Everything())), []string{"a/mine", "a/mine-too", "b/mine"}},
		{"by label", names(l.List(web)), []string{"a/mine", "b/mine"}},
		{"in a namespace", names(l.Pods("a").List(labels.Everything())), []string{"a/mine", "a/mine-too"}},
		{"in a namespace, by label", names(l.Pods("b").List(web)), []string{"b/mine"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got); diff != "" {
				t.Errorf("pods (-want +got):\n%s", diff)
			}
		})
	}
	for _, tc := range []struct {
		ns, name string
		found    bool
	}{
		{"a", "mine", true},
		{"b", "mine", true},
		{"a", "elsewhere", false}, // another node's
		{"a", "unbound", false},
		{"a", "missing", false},
	} {
		got, err := l.Pods(tc.ns).Get(tc.name)
		switch {
		case tc.found && (err != nil || got.Name != tc.name || got.Namespace != tc.ns):
			t.Errorf("Get(%s/%s) = %v, %v; want the pod", tc.ns, tc.name, got, err)
		case !tc.found && !apierrors.IsNotFound(err):
			t.Errorf("Get(%s/%s) = %v, %v; want NotFound", tc.ns, tc.name, got, err)
		}
	}
	filter := onNode("annex-beta")
	for _, tc := range []struct {
		obj  any
		want bool
	}{
		{pod("a", "mine", "annex-beta", nil), true},
		{toolscache.DeletedFinalStateUnknown{Key: "a/mine", Obj: pod("a", "mine", "annex-beta", nil)}, true},
		{pod("a", "elsewhere", "worker-1", nil), false},
		{pod("a", "unbound", "", nil), false},
		{&corev1.Node{}, false},
	} {
		if got := filter(tc.obj); got != tc.want {
			t.Errorf("onNode(%v) = %v, want %v", tc.obj, got, tc.want)
		}
	}
}
