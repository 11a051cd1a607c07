package podreflector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadingv1alpha1 "github.com/annexhq/annex/apis/offloading/v1alpha1"
)

// Clientset is a clientset whose requests are served by f's fake client:
// only what the reflector sends through it (ShadowPod creations) is
// understood, as the provider's API server would answer it.
func (f *fakeRemotes) Clientset(string) (kubernetes.Interface, error) {
	hc := &http.Client{Transport: roundTripFunc(f.serve)}
	return kubernetes.NewForConfigAndClient(&rest.Config{Host: "https://provider.invalid"}, hc)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// serve answers a ShadowPod creation: with its metadata only when asked
// so, with the API server's Status of the fake client's error otherwise.
func (f *fakeRemotes) serve(req *http.Request) (*http.Response, error) {
	gv := offloadingv1alpha1.GroupVersion
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/"), "/")
	if req.Method != http.MethodPost || len(parts) != 6 || parts[0] != "apis" || parts[1] != gv.Group || parts[2] != gv.Version ||
		parts[3] != "namespaces" || parts[5] != "shadowpods" {
		return answer(http.StatusNotFound, apierrors.NewNotFound(gv.WithResource("unknown").GroupResource(), req.URL.Path).Status())
	}
	if !strings.HasPrefix(req.Header.Get("Accept"), "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1") ||
		req.Header.Get("Content-Type") != "application/json" {
		return answer(http.StatusNotAcceptable, apierrors.NewBadRequest("want JSON in, metadata out").Status())
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	sp := &offloadingv1alpha1.ShadowPod{}
	if err := json.Unmarshal(body, sp); err != nil || sp.Namespace != parts[4] || sp.Kind != "ShadowPod" || sp.APIVersion != gv.String() {
		return answer(http.StatusBadRequest, apierrors.NewBadRequest(fmt.Sprintf("bad ShadowPod %s: %v", body, err)).Status())
	}
	sp.TypeMeta = metav1.TypeMeta{}
	if err := f.c.Create(req.Context(), sp, client.FieldOwner(req.URL.Query().Get("fieldManager"))); err != nil {
		var s apierrors.APIStatus
		if !errors.As(err, &s) {
			return answer(http.StatusInternalServerError, apierrors.NewInternalError(err).Status())
		}
		return answer(int(s.Status().Code), s.Status())
	}
	meta := metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}, ObjectMeta: sp.ObjectMeta}
	return answer(http.StatusCreated, meta)
}

func answer(code int, obj any) (*http.Response, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	if s, ok := obj.(metav1.Status); ok {
		s.Kind, s.APIVersion = "Status", "v1"
		b, _ = json.Marshal(s)
	}
	return &http.Response{StatusCode: code, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(b))}, nil
}
