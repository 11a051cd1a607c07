package remote

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
)

// reachability is what the Manager believes about a peer.
type reachability int

const (
	// unknown: no verdict yet (the peer was just added or un-marked).
	unknown reachability = iota
	reachable
	unreachable
)

func (r reachability) String() string {
	switch r {
	case reachable:
		return "Reachable"
	case unreachable:
		return "Unreachable"
	default:
		return "Unknown"
	}
}

// tracker turns a stream of probe outcomes into a reachability state with
// hysteresis: FailureThreshold consecutive failures make a peer unreachable,
// SuccessThreshold consecutive successes make it reachable again. The first
// verdict about a peer needs a single success (there is no earlier state to
// flap from) or FailureThreshold failures.
type tracker struct {
	failureThreshold int
	successThreshold int

	state     reachability
	failures  int // consecutive failed probes
	successes int // consecutive successful probes
}

// observe records one probe outcome and reports whether the state changed.
func (t *tracker) observe(ok bool) bool {
	if ok {
		t.successes++
		t.failures = 0
	} else {
		t.failures++
		t.successes = 0
	}
	prev := t.state
	switch {
	case ok && (t.state == unknown || t.successes >= t.successThreshold):
		t.state = reachable
	case !ok && t.failures >= t.failureThreshold:
		t.state = unreachable
	}
	return t.state != prev
}

// reset forgets the state and the streaks.
func (t *tracker) reset() {
	t.state, t.failures, t.successes = unknown, 0, 0
}

// probeResult is the outcome of one GET /readyz.
type probeResult struct {
	at      time.Time     // when the probe started
	latency time.Duration // round-trip time
	ok      bool
	// reason is one of the ForeignCluster reasons: ProbeSucceeded,
	// ProbeFailed, ProbeTimeout, CredentialsRejected, PermissionDenied.
	reason string
	// detail says what happened, in words a person can act on; it contains
	// nothing that changes from one probe to the next (no ports, no
	// latencies) so that conditions built from it stay stable.
	detail string
	// httpStatus is the HTTP status code, 0 when no answer came back.
	httpStatus int
}

// maxBody bounds how much of a /readyz answer is read.
const maxBody = 4 << 10

// probe GETs readyzURL once, bounded by timeout. now is the clock. When
// parent ends during the probe the result is meaningless; the caller checks
// parent and drops it.
func probe(parent context.Context, hc *http.Client, readyzURL string, timeout time.Duration, now func() time.Time) probeResult {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()

	start := now()
	res := probeResult{at: start}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, readyzURL, nil)
	if err != nil {
		res.reason, res.detail = corev1alpha1.ReasonProbeFailed, fmt.Sprintf("cannot build request: %v", err)
		return res
	}
	resp, err := hc.Do(req)
	if err != nil {
		res.latency = now().Sub(start)
		res.reason, res.detail = classifyError(ctx, err, timeout)
		return res
	}
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	_ = resp.Body.Close()
	res.latency = now().Sub(start)
	res.httpStatus = resp.StatusCode
	if readErr != nil && resp.StatusCode == http.StatusOK {
		// The server started to answer and then stopped: treat as the
		// network error it is.
		res.reason, res.detail = classifyError(ctx, readErr, timeout)
		return res
	}
	res.reason, res.detail, res.ok = classifyStatus(resp, body)
	return res
}

// classifyStatus interprets an HTTP answer of /readyz.
func classifyStatus(resp *http.Response, body []byte) (reason, detail string, ok bool) {
	switch resp.StatusCode {
	case http.StatusOK:
		return corev1alpha1.ReasonProbeSucceeded, "200 OK", true
	case http.StatusUnauthorized:
		return corev1alpha1.ReasonCredentialsRejected,
			"401 Unauthorized: the API server rejected the credentials (token expired or revoked?); renew the credentials Secret or peer again", false
	case http.StatusForbidden:
		return corev1alpha1.ReasonPermissionDenied,
			"403 Forbidden: the credentials were accepted but may not read /readyz, which any authenticated user normally can; check the RBAC on the remote cluster", false
	}
	detail = "HTTP " + resp.Status
	if failed := failedChecks(body); failed != "" {
		detail += ": " + failed
	}
	return corev1alpha1.ReasonProbeFailed, detail, false
}

// failedChecks extracts the failing checks ("[-]etcd failed: ...") from a
// /readyz answer.
func failedChecks(body []byte) string {
	var failed []string
	for line := range strings.SplitSeq(string(body), "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "[-]") {
			failed = append(failed, line)
		}
	}
	s := strings.Join(failed, ", ")
	if len(s) > 256 {
		s = s[:256] + "..."
	}
	return s
}

// classifyError turns a transport error into a reason and a stable detail.
func classifyError(ctx context.Context, err error, timeout time.Duration) (reason, detail string) {
	var (
		netErr  net.Error
		dnsErr  *net.DNSError
		unkAuth x509.UnknownAuthorityError
		hostErr x509.HostnameError
		certErr x509.CertificateInvalidError
	)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return corev1alpha1.ReasonProbeTimeout,
			fmt.Sprintf("no answer within %s (API server hung or overloaded)", timeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		return corev1alpha1.ReasonProbeFailed, "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return corev1alpha1.ReasonProbeFailed, "connection reset by the server"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return corev1alpha1.ReasonProbeFailed, "connection closed by the server before it answered"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return corev1alpha1.ReasonProbeFailed, "no route to host"
	case errors.As(err, &dnsErr):
		return corev1alpha1.ReasonProbeFailed, fmt.Sprintf("cannot resolve %s", dnsErr.Name)
	case errors.As(err, &unkAuth):
		return corev1alpha1.ReasonProbeFailed,
			"the server certificate is not signed by the CA in the kubeconfig (certificate-authority-data)"
	case errors.As(err, &hostErr), errors.As(err, &certErr):
		return corev1alpha1.ReasonProbeFailed, "invalid server certificate: " + innermost(err)
	}
	return corev1alpha1.ReasonProbeFailed, innermost(err)
}

// innermost strips the parts of a transport error that change between
// probes (URL, local port) and keeps the cause.
func innermost(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return opErr.Err.Error()
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) && urlErr.Err != nil {
		return urlErr.Err.Error()
	}
	return err.Error()
}
