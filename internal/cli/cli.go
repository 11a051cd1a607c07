// Package cli owns what every annexctl command shares: the I/O streams a
// command writes to, loading a kubeconfig into a client that is checked to
// reach its cluster, server-side apply of manifests, and waiting with
// progress output.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/annexhq/annex/internal/agent"
)

// IOStreams are where a command reads and writes; tests pass buffers.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// StdStreams are the process's own streams.
func StdStreams() IOStreams { return IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr} }

// Step prints one progress line.
func (s IOStreams) Step(format string, args ...any) {
	fmt.Fprintf(s.Out, "• "+format+"\n", args...)
}

// FieldOwner is the server-side-apply field manager of everything annexctl writes.
const FieldOwner = "annexctl"

// Cluster is a connection to one cluster through a kubeconfig.
type Cluster struct {
	Kubeconfig string
	Host       string
	Config     *rest.Config
	Client     client.Client
	Clientset  kubernetes.Interface
}

// Connect loads the kubeconfig at path (empty: $KUBECONFIG or ~/.kube/config)
// and checks within timeout that the cluster answers. Errors name the
// kubeconfig and the server so a person knows which one is wrong.
func Connect(ctx context.Context, path string, timeout time.Duration) (*Cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, errors.Unwrap(err))
		}
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", displayPath(path), err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = timeout
	cfg.QPS, cfg.Burst = 50, 100
	scheme, err := agent.Scheme()
	if err != nil {
		return nil, err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", displayPath(path), err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cl := &Cluster{Kubeconfig: displayPath(path), Host: cfg.Host, Config: cfg, Client: c, Clientset: cs}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := cl.waitReady(pctx, time.Second); err != nil {
		return nil, cl.Unreachable(err)
	}
	return cl, nil
}

// waitReady asks the API server's /readyz until it says ready or ctx ends.
// An API server that answers but is not ready yet (a 500 listing failed
// checks: it has just started, or restarted) is asked again every interval;
// any other error ends the wait at once.
func (c *Cluster) waitReady(ctx context.Context, interval time.Duration) error {
	var last error // the last not-ready answer
	for {
		_, err := c.Clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		switch {
		case err == nil:
			return nil
		case notReady(err):
			last = err
		case last != nil && !isAnswer(err):
			// Out of time (or the rate limiter says so) after a not-ready
			// answer: that answer says what is wrong.
			return last
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(interval):
		}
	}
}

// isAnswer reports whether err is an answer of the API server.
func isAnswer(err error) bool {
	var st apierrors.APIStatus
	return errors.As(err, &st)
}

// notReady reports whether err is an API server's answer that it is not
// ready (500 or 503), as opposed to no answer or a refusal.
func notReady(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	code := st.Status().Code
	return code == 500 || code == 503
}

// failedChecks returns the failed checks of a /readyz answer ("[-]name
// failed: reason"), comma-separated, or "" when it lists none.
func failedChecks(body string) string {
	var failed []string
	// An error's text quotes the body: its line breaks read as \n.
	body = strings.ReplaceAll(body, `\n`, "\n")
	for _, f := range strings.FieldsFunc(body, func(r rune) bool { return r == '\n' || r == '"' }) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(f), "[-]"); ok {
			failed = append(failed, name)
		}
	}
	return strings.Join(failed, ", ")
}

// Unreachable turns a connection error into one sentence a person can act on.
func (c *Cluster) Unreachable(err error) error {
	var reason string
	var uerr *url.Error
	var nerr net.Error
	switch {
	case apierrors.IsUnauthorized(err):
		reason = "the credentials were rejected (401)"
	case apierrors.IsForbidden(err):
		reason = "the credentials may not read /readyz (403)"
	case errors.As(err, &nerr) && nerr.Timeout(), errors.Is(err, context.DeadlineExceeded):
		reason = "no answer before the timeout (is the API server hung or firewalled?)"
	case errors.As(err, &uerr) && strings.Contains(uerr.Err.Error(), "connection refused"):
		reason = "connection refused (is the API server running?)"
	case notReady(err) && failedChecks(err.Error()) != "":
		reason = "the API server answers but is not ready: " + failedChecks(err.Error())
	default:
		reason = err.Error()
	}
	return fmt.Errorf("cannot reach the cluster of kubeconfig %s at %s: %s", c.Kubeconfig, c.Host, reason)
}

func displayPath(p string) string {
	if p == "" {
		return "(default)"
	}
	return p
}

// Poll calls cond every interval until it returns true, an error, or timeout
// passes; it then returns an error naming what was awaited.
func Poll(ctx context.Context, interval, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if err == nil && ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("timed out after %s waiting for %s: %w", timeout, what, last)
			}
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		case <-time.After(interval):
		}
	}
}
