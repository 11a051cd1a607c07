package kubeletserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/utils/clock"
)

// Serving certificates requested through the CertificateSigningRequest API.
const (
	// CommonName is the subject of the requested certificate. The signer
	// kubernetes.io/kubelet-serving wants system:node:<anything> in
	// organization system:nodes; the API server only checks the IP SAN.
	CommonName = "system:node:annex-virtual-nodes"
	// csrNamePrefix prefixes the names of the agent's CSRs.
	csrNamePrefix = "annex-kubelet-serving-"
	// ReasonApproved is the reason of the agent's approval of its own CSR.
	ReasonApproved = "AnnexAgentApproved"
	// issueTimeout bounds the wait for the signer.
	issueTimeout = 2 * time.Minute
	// Retries of a failed request, doubling from the first to the last.
	retryFirst, retryMax = 2 * time.Second, 2 * time.Minute
)

// certHolder is the certificate the server presents.
type certHolder struct {
	cur atomic.Pointer[tls.Certificate]
}

// GetCertificate implements tls.Config.GetCertificate.
func (h *certHolder) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := h.cur.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("no serving certificate yet")
}

// fileCerts serves the operator's certificate and key files, reloaded when
// they change.
type fileCerts struct {
	holder  *certHolder
	content *dynamiccertificates.DynamicCertKeyPairContent
	log     logr.Logger
}

func newFileCerts(certFile, keyFile string, holder *certHolder, log logr.Logger) (*fileCerts, error) {
	content, err := dynamiccertificates.NewDynamicServingContentFromFiles("kubelet-serving", certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load --kubelet-cert-file/--kubelet-key-file: %w", err)
	}
	f := &fileCerts{holder: holder, content: content, log: log}
	content.AddListener(f)
	f.Enqueue()
	return f, nil
}

// Enqueue implements dynamiccertificates.Listener: the files changed.
func (f *fileCerts) Enqueue() {
	certPEM, keyPEM := f.content.CurrentCertKeyContent()
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		f.log.Error(err, "Cannot use the new serving certificate; keeping the previous one")
		return
	}
	f.holder.cur.Store(&c)
	f.log.Info("Serving certificate loaded", "notAfter", c.Leaf.NotAfter)
}

// run watches the files until ctx ends.
func (f *fileCerts) run(ctx context.Context) { f.content.Run(ctx, 1) }

// csrCerts obtains the serving certificate from the cluster's
// kubernetes.io/kubelet-serving signer: it creates a CertificateSigningRequest
// for a fresh key, approves that request itself (the approver only ever
// approves the request it just created, checked by UID) and waits for the
// signed certificate. It renews it at a random point between 70% and 90% of
// its lifetime.
type csrCerts struct {
	holder *certHolder
	cs     kubernetes.Interface
	ip     net.IP
	clock  clock.Clock
	log    logr.Logger
}

// run obtains a certificate, retrying until it succeeds or ctx ends, then
// renews it until ctx ends. ready is closed once the first one is in the
// holder.
func (c *csrCerts) run(ctx context.Context, ready chan<- struct{}) {
	first := true
	for {
		cert := c.obtain(ctx)
		if cert == nil {
			return // ctx ended
		}
		c.holder.cur.Store(cert)
		renew := renewalTime(cert.Leaf, 0.7+0.2*mathrand.Float64()) //nolint:gosec // G404: jitter, not a secret
		c.log.Info("Serving certificate issued", "notAfter", cert.Leaf.NotAfter, "renewAt", renew)
		if first {
			close(ready)
			first = false
		}
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(renew.Sub(c.clock.Now())):
		}
	}
}

// obtain issues a certificate, retrying with backoff; nil when ctx ends.
func (c *csrCerts) obtain(ctx context.Context) *tls.Certificate {
	delay := retryFirst
	for {
		cert, err := c.issue(ctx)
		if err == nil {
			return cert
		}
		if ctx.Err() != nil {
			return nil
		}
		c.log.Error(err, "Cannot obtain the kubelet serving certificate; retrying", "in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-c.clock.After(delay):
		}
		delay = min(2*delay, retryMax)
	}
}

// issue runs one CertificateSigningRequest to completion.
func (c *csrCerts) issue(ctx context.Context) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: CommonName, Organization: []string{"system:nodes"}},
		IPAddresses: []net.IP{c.ip},
	}, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, issueTimeout)
	defer cancel()
	name, uid, err := csr.RequestCertificateWithContext(ctx, c.cs,
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		csrNamePrefix+utilrand.String(8), certificatesv1.KubeletServingSignerName, nil,
		// ECDSA keys: no key encipherment (the signer accepts exactly this set).
		[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}, key)
	if err != nil {
		return nil, err
	}
	req, err := c.cs.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read CertificateSigningRequest %s: %w", name, err)
	}
	if req.UID != uid {
		return nil, fmt.Errorf("CertificateSigningRequest %s was replaced", name)
	}
	req.Status.Conditions = append(req.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: ReasonApproved,
		Message:        "the Annex agent approved its own request for the serving certificate of its virtual nodes",
		LastUpdateTime: metav1.NewTime(c.clock.Now()),
	})
	if _, err := c.cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, req, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("approve CertificateSigningRequest %s: %w", name, err)
	}
	certPEM, err := csr.WaitForCertificate(ctx, c.cs, name, uid)
	if err != nil {
		return nil, fmt.Errorf("wait for CertificateSigningRequest %s to be signed: %w", name, err)
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return nil, fmt.Errorf("CertificateSigningRequest %s: %w", name, err)
	}
	return &cert, nil
}

// renewalTime is when a certificate is renewed: after fraction of its
// lifetime.
func renewalTime(cert *x509.Certificate, fraction float64) time.Time {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotBefore.Add(time.Duration(fraction * float64(life)))
}
