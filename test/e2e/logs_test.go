package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/annexhq/annex/internal/localcluster"
)

// TestLogs: alpha offloads a namespace to beta; kubectl logs, exec and
// port-forward of a pod on the virtual node go through the agent's kubelet
// endpoint to the pod on beta (kwok serves its log line, runs the command
// and echoes what reaches a forwarded port); the endpoint
// presents a certificate of alpha's CA and lets only the API server in.
func TestLogs(t *testing.T) {
	alpha, beta := env.clusters[0], env.clusters[1]
	ctx := context.Background()
	installAndRunAgent(t, alpha, "alpha")
	installAndRunAgent(t, beta, "beta")
	if out, err := annexctl(t, "peer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", beta.KubeconfigPath(), "--cpu", "2", "--memory", "4Gi", "--pods", "10"); err != nil {
		t.Fatalf("peer: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := annexctl(t, "unpeer", "--kubeconfig", alpha.KubeconfigPath(), "--remote-kubeconfig", beta.KubeconfigPath()); err != nil {
			t.Errorf("unpeer: %v\n%s", err, out)
		}
	})
	ca := crClient(t, alpha)
	eventually(t, 30*time.Second, "virtual node annex-beta Ready", func() error { return nodeReady(ctx, ca, "annex-beta") })

	const ns = "logs"
	if err := ca.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := annexctl(t, "unoffload", "namespace", ns, "--kubeconfig", alpha.KubeconfigPath()); err != nil {
			t.Errorf("unoffload: %v\n%s", err, out)
		}
		_ = ca.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	if out, err := annexctl(t, "offload", "namespace", ns, "--kubeconfig", alpha.KubeconfigPath(), "--pod-strategy", "Remote"); err != nil {
		t.Fatalf("offload: %v\n%s", err, out)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "talker", Labels: map[string]string{"app": "talker"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}}}},
	}
	if err := ca.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, 120*time.Second, "pod talker Running on annex-beta", func() error {
		return podsReady(ctx, ca, ns, "app=talker", 1, func(p *corev1.Pod) error {
			if p.Spec.NodeName != "annex-beta" {
				return fmt.Errorf("pod on %q", p.Spec.NodeName)
			}
			return nil
		})
	})
	cs := clientset(t, alpha)
	want := localcluster.KwokLogLine("beta")

	t.Run("kubectl logs", func(t *testing.T) {
		var logs []byte
		eventually(t, 30*time.Second, "logs of talker", func() error {
			var err error
			logs, err = cs.CoreV1().Pods(ns).GetLogs("talker", &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
			return err
		})
		if !strings.Contains(string(logs), want) {
			t.Errorf("logs = %q, want %q", logs, want)
		}
		logs, err := cs.CoreV1().Pods(ns).GetLogs("talker", &corev1.PodLogOptions{TailLines: ptr.To(int64(1)), Timestamps: true}).DoRaw(ctx)
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(logs)), want) || !strings.HasPrefix(string(logs), "20") {
			t.Errorf("logs --tail=1 --timestamps = %q, %v", logs, err)
		}
		// Following: the stream stays open until the client goes away.
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		stream, err := cs.CoreV1().Pods(ns).GetLogs("talker", &corev1.PodLogOptions{Follow: true}).Stream(fctx)
		if err != nil {
			t.Fatalf("logs -f: %v", err)
		}
		line, err := bufio.NewReader(stream).ReadString('\n')
		if err != nil || !strings.Contains(line, want) {
			t.Errorf("logs -f first line %q, %v", line, err)
		}
		cancel()
		stream.Close()
	})
	t.Run("kubectl exec", func(t *testing.T) {
		cfg, err := alpha.RESTConfig()
		if err != nil {
			t.Fatal(err)
		}
		req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name("talker").SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: "main", Command: []string{"printenv", localcluster.KwokExecEnv}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
		// As kubectl: WebSocket, SPDY if the server cannot upgrade.
		ws, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, req.URL().String())
		if err != nil {
			t.Fatal(err)
		}
		spdy, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, req.URL())
		if err != nil {
			t.Fatal(err)
		}
		exec, _ := remotecommand.NewFallbackExecutor(ws, spdy, httpstream.IsUpgradeFailure)
		ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var stdout, stderr bytes.Buffer
		if err := exec.StreamWithContext(ectx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
			t.Fatalf("exec: %v (stderr %q)", err, stderr.String())
		}
		if got := strings.TrimSpace(stdout.String()); got != "beta" {
			t.Errorf("exec printenv %s = %q, want beta (the command runs on beta)", localcluster.KwokExecEnv, got)
		}
	})
	t.Run("kubectl port-forward", func(t *testing.T) {
		cfg, err := alpha.RESTConfig()
		if err != nil {
			t.Fatal(err)
		}
		// As kubectl: SPDY tunnelled over WebSocket, plain SPDY if the
		// server cannot upgrade.
		u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name("talker").SubResource("portforward").URL()
		rt, upgrader, err := spdy.RoundTripperFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
		if tunnel, err := portforward.NewSPDYOverWebsocketDialer(u, cfg); err == nil {
			dialer = portforward.NewFallbackDialer(tunnel, dialer, func(err error) bool {
				return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
			})
		}
		stop, ready := make(chan struct{}), make(chan struct{})
		pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, io.Discard, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		var fwdErr error
		go func() { fwdErr = pf.ForwardPorts(); close(done) }()
		defer func() { close(stop); <-done }()
		select {
		case <-ready:
		case <-done:
			t.Fatalf("port-forward: %v", fwdErr)
		case <-time.After(30 * time.Second):
			t.Fatal("port-forward not ready within 30s")
		}
		ports, err := pf.GetPorts()
		if err != nil {
			t.Fatal(err)
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		// kwok on beta connects every forwarded port to `cat`.
		if _, err := fmt.Fprintln(conn, "ping through annex-beta"); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil || line != "ping through annex-beta\n" {
			t.Errorf("port-forward echo = %q, %v; want the line back from beta", line, err)
		}
	})
	t.Run("only the API server may call the endpoint", func(t *testing.T) {
		node := &corev1.Node{}
		if err := ca.Get(ctx, client.ObjectKey{Name: "annex-beta"}, node); err != nil {
			t.Fatal(err)
		}
		port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
		if port == 0 {
			t.Fatal("annex-beta advertises no kubelet port")
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(alpha.CA())
		janeCert, janeKey, err := alpha.ClientCert("jane", "devs")
		if err != nil {
			t.Fatal(err)
		}
		jane, err := tls.X509KeyPair(janeCert, janeKey)
		if err != nil {
			t.Fatal(err)
		}
		url := "https://127.0.0.1:" + strconv.Itoa(int(port)) + "/containerLogs/" + ns + "/talker/main"
		for name, tc := range map[string]struct {
			certs []tls.Certificate
			want  int
		}{
			"without a client certificate":     {nil, http.StatusUnauthorized},
			"with a user's client certificate": {[]tls.Certificate{jane}, http.StatusForbidden},
		} {
			// The serving certificate must verify with alpha's CA for 127.0.0.1.
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: tc.certs, MinVersion: tls.VersionTLS12}}}
			resp, err := hc.Get(url)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || strings.Contains(string(body), want) {
				t.Errorf("%s: %s %q, want %d", name, resp.Status, body, tc.want)
			}
		}
	})
}
