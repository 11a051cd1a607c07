package kubeletserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestSARAuthorizer(t *testing.T) {
	cs := k8sfake.NewClientset()
	var asked []authorizationv1.SubjectAccessReviewSpec
	var fail error
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		asked = append(asked, sar.Spec)
		if fail != nil {
			return true, nil, fail
		}
		allowed := sar.Spec.User == "admin"
		sar.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: allowed, Reason: "by the test"}
		return true, sar, nil
	})
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
	a := newSARAuthorizer(cs.AuthorizationV1().SubjectAccessReviews(), clk)
	proxy := func(name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{
			User: &user.DefaultInfo{Name: name, UID: "u-" + name, Groups: []string{"system:authenticated"}, Extra: map[string][]string{"scope": {"a"}}},
			Verb: "get", APIVersion: "v1", Resource: "nodes", Subresource: "proxy", Name: "annex-beta", ResourceRequest: true,
			Path: "/containerLogs/demo/web/app",
		}
	}
	decide := func(attrs authorizer.AttributesRecord) (authorizer.Decision, error) {
		d, _, err := a.Authorize(context.Background(), attrs)
		return d, err
	}

	// The review says who asks for what.
	if d, err := decide(proxy("admin")); d != authorizer.DecisionAllow || err != nil {
		t.Fatalf("admin: %v, %v; want Allow", d, err)
	}
	want := authorizationv1.SubjectAccessReviewSpec{
		User: "admin", UID: "u-admin", Groups: []string{"system:authenticated"},
		Extra:              map[string]authorizationv1.ExtraValue{"scope": {"a"}},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Version: "v1", Resource: "nodes", Subresource: "proxy", Name: "annex-beta"},
	}
	if diff := cmp.Diff([]authorizationv1.SubjectAccessReviewSpec{want}, asked); diff != "" {
		t.Errorf("reviews (-want +got):\n%s", diff)
	}

	for _, step := range []struct {
		name    string
		user    string
		advance time.Duration
		fail    error
		want    authorizer.Decision
		reviews int // reviews asked so far
	}{
		{name: "an allowance is remembered", user: "admin", advance: authzAllowTTL - time.Second, want: authorizer.DecisionAllow, reviews: 1},
		{name: "and asked again once it expired", user: "admin", advance: time.Second, want: authorizer.DecisionAllow, reviews: 2},
		{name: "a denial", user: "eve", want: authorizer.DecisionDeny, reviews: 3},
		{name: "is remembered", user: "eve", advance: authzDenyTTL - time.Second, want: authorizer.DecisionDeny, reviews: 3},
		{name: "for less time", user: "eve", advance: time.Second, want: authorizer.DecisionDeny, reviews: 4},
		{name: "no answer is no opinion", user: "mallory", fail: errors.New("API server down"), want: authorizer.DecisionNoOpinion, reviews: 5},
		{name: "and is not remembered", user: "mallory", want: authorizer.DecisionDeny, reviews: 6},
	} {
		clk.Step(step.advance)
		fail = step.fail
		d, err := decide(proxy(step.user))
		if d != step.want || (err != nil) != (step.fail != nil) || len(asked) != step.reviews {
			t.Errorf("%s: %v, %v after %d reviews; want %v after %d", step.name, d, err, len(asked), step.want, step.reviews)
		}
	}

	// A non-resource request is reviewed by its path.
	fail = nil
	nonResource := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "admin"}, Verb: "get", Path: "/healthz"}
	if d, err := decide(nonResource); d != authorizer.DecisionAllow || err != nil {
		t.Fatalf("non-resource: %v, %v", d, err)
	}
	if diff := cmp.Diff(&authorizationv1.NonResourceAttributes{Path: "/healthz", Verb: "get"}, asked[len(asked)-1].NonResourceAttributes); diff != "" {
		t.Errorf("non-resource review (-want +got):\n%s", diff)
	}
}
