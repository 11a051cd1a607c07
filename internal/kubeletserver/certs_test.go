package kubeletserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/annexhq/annex/internal/localcluster"
)

func TestRenewalTime(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cert := &x509.Certificate{NotBefore: start, NotAfter: start.Add(100 * time.Hour)}
	if got, want := renewalTime(cert, 0.75), start.Add(75*time.Hour); !got.Equal(want) {
		t.Errorf("renewalTime(0.75) = %s, want %s", got, want)
	}
}

// runSigner signs the approved CSRs of cs with ca, as the controller
// manager's kubernetes.io/kubelet-serving signer does, until ctx ends.
func runSigner(ctx context.Context, t *testing.T, cs kubernetes.Interface, ca *testCA) {
	go func() {
		for ctx.Err() == nil {
			list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range list.Items {
					csr := &list.Items[i]
					if len(csr.Status.Certificate) > 0 || !approved(csr) {
						continue
					}
					block, _ := pem.Decode(csr.Spec.Request)
					req, err := x509.ParseCertificateRequest(block.Bytes)
					if err != nil {
						t.Errorf("CSR %s: %v", csr.Name, err)
						continue
					}
					csr.Status.Certificate = ca.sign(t, &x509.Certificate{Subject: req.Subject, IPAddresses: req.IPAddresses,
						KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, req.PublicKey)
					_, _ = cs.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{})
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

func approved(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func TestIssueThroughCSR(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ca := newTestCA(t)
	cs := kubefake.NewClientset()
	runSigner(ctx, t, cs, ca)
	c := &csrCerts{holder: &certHolder{}, cs: cs, ip: net.IPv4(127, 0, 0, 1), clock: clock.RealClock{}, log: testr.New(t)}
	cert, err := c.issue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: ca.pool(), DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("issued certificate does not verify for 127.0.0.1: %v", err)
	}
	list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("CSRs: %v %v", list, err)
	}
	csr := list.Items[0]
	block, _ := pem.Decode(csr.Spec.Request)
	req, _ := x509.ParseCertificateRequest(block.Bytes)
	type view struct {
		Prefix, Signer, CN string
		O                  []string
		IPs                string
		Usages             []certificatesv1.KeyUsage
		ApprovedBy         string
	}
	got := view{Prefix: csr.Name[:len(csrNamePrefix)], Signer: csr.Spec.SignerName, CN: req.Subject.CommonName, O: req.Subject.Organization,
		IPs: ipString(req.IPAddresses), Usages: csr.Spec.Usages}
	for _, cond := range csr.Status.Conditions {
		if cond.Type == certificatesv1.CertificateApproved {
			got.ApprovedBy = cond.Reason
		}
	}
	want := view{Prefix: csrNamePrefix, Signer: certificatesv1.KubeletServingSignerName, CN: CommonName, O: []string{"system:nodes"},
		IPs: "127.0.0.1", Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}, ApprovedBy: ReasonApproved}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CSR (-want +got):\n%s", diff)
	}
}

func ipString(ips []net.IP) string {
	var s []string
	for _, ip := range ips {
		s = append(s, ip.String())
	}
	return strings.Join(s, ",")
}

// TestStart runs the server as the agent does, with a fake API (the client
// CA ConfigMap, the CSR signer) and a fake authorizer: it serves TLS with
// the issued certificate and authenticates callers by client certificate.
func TestStart(t *testing.T) {
	ca := newTestCA(t)
	clientsCA := newTestCA(t)
	cs := kubefake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: clientCANamespace, Name: clientCAConfigMap},
		Data:       map[string]string{clientCAKey: string(clientsCA.pem)},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runSigner(ctx, t, cs, ca)
	provider := newFakeProvider(t)
	addr, err := localcluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	s, err := New(Config{Options: Options{Port: port}, NodeIP: "127.0.0.1",
		Local:     fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(localObjects()...).Build(),
		Clientset: cs, Remotes: fakeRemotes{"beta": provider.config()}, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The delegating authorizer needs a real API server; keep its inputs.
	fakeAuthz, _ := newTestServer(t, nil)
	s.authz = fakeAuthz.authz
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()

	call := func(cert *tls.Certificate) (int, string, error) {
		tc := &tls.Config{RootCAs: ca.pool(), MinVersion: tls.VersionTLS12}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		resp, err := hc.Get("https://" + addr + "/containerLogs/shop/web/c1")
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}
	apiserver := clientsCA.clientCert(t, apiserverUser)
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, err := call(&apiserver)
		if err == nil && code == http.StatusOK && body == "hello from beta\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs through the TLS endpoint: %d %q %v", code, body, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	jane := clientsCA.clientCert(t, "jane")
	if code, _, err := call(&jane); err != nil || code != http.StatusForbidden {
		t.Errorf("as jane: %d %v, want 403", code, err)
	}
	stranger := newTestCA(t).clientCert(t, apiserverUser)
	if code, _, err := call(&stranger); err != nil || code != http.StatusUnauthorized {
		t.Errorf("with a certificate of another CA: %d %v, want 401", code, err)
	}
	if code, _, err := call(nil); err != nil || code != http.StatusUnauthorized {
		t.Errorf("without a client certificate: %d %v, want 401", code, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("Start did not return after its context ended")
	}
}

func TestStartWithCertificateFiles(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certPEM, keyPEM := ca.servingPEM(t)
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	addr, err := localcluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	cs := kubefake.NewClientset()
	s, err := New(Config{Options: Options{Port: port, CertFile: certFile, KeyFile: keyFile}, NodeIP: "127.0.0.1",
		Clientset: cs, Remotes: fakeRemotes{}, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool(), MinVersion: tls.VersionTLS12}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get("https://" + addr + "/pods")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("without a client certificate: %s, want 401", resp.Status)
			}
			break
		}
		var certErr *tls.CertificateVerificationError
		if errors.As(err, &certErr) || time.Now().After(deadline) {
			t.Fatalf("the operator's certificate is not served: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// No CertificateSigningRequest when the operator gives the certificate.
	if list, _ := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("%d CSRs created with --kubelet-cert-file", len(list.Items))
	}
}
