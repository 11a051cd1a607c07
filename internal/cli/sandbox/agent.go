package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	corev1alpha1 "github.com/annexhq/annex/apis/core/v1alpha1"
	"github.com/annexhq/annex/internal/cli"
	"github.com/annexhq/annex/internal/localcluster"
)

// AgentServiceAccount is the ServiceAccount the agent authenticates as.
const AgentServiceAccount = "annex-agent"

// Agent is an annex-agent running as a local process for one cluster.
type Agent struct {
	PID        int    `json:"pid"`
	StartTime  uint64 `json:"startTime"`
	HealthAddr string `json:"healthAddr"`
	// MetricsAddr serves Prometheus metrics at /metrics.
	MetricsAddr string `json:"metricsAddr"`
	Kubeconfig  string `json:"kubeconfig"`
	Log         string `json:"log"`
}

// AgentOptions say how to run a local agent.
type AgentOptions struct {
	// Binary is the annex-agent executable.
	Binary string
	// TokenTTL is the lifetime of the ServiceAccount token it runs with.
	TokenTTL time.Duration
	// Args are extra agent flags.
	Args []string
	// Detach lets the agent outlive this process.
	Detach bool
}

// StartAgent writes a kubeconfig that authenticates as the annex-agent
// ServiceAccount with a bound token (never the admin credentials), starts
// annex-agent with it, and waits until the agent reports Ready.
func StartAgent(ctx context.Context, c *localcluster.Cluster, o AgentOptions) (*Agent, error) {
	kubeconfig, err := writeAgentKubeconfig(ctx, c, o.TokenTTL)
	if err != nil {
		return nil, err
	}
	health, err := localcluster.FreeAddr()
	if err != nil {
		return nil, err
	}
	metrics, err := localcluster.FreeAddr()
	if err != nil {
		return nil, err
	}
	// The virtual nodes' kubelet endpoint: the agents of a sandbox share
	// 127.0.0.1, so each needs its own port.
	kubelet, err := localcluster.FreeAddr()
	if err != nil {
		return nil, err
	}
	_, kubeletPort, _ := net.SplitHostPort(kubelet)
	logPath := filepath.Join(c.Dir(), "logs", "annex-agent.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logf.Close() }() // the child has its own descriptor
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + corev1alpha1.AgentNamespace,
		"--health-probe-bind-address=" + health,
		"--metrics-bind-address=" + metrics,
		"--kubelet-port=" + kubeletPort,
	}, o.Args...)
	cmd := exec.Command(o.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !o.Detach {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w (build it with `make build`, or pass --agent-binary)", o.Binary, err)
	}
	start, _ := localcluster.ProcessStartTime(cmd.Process.Pid)
	a := &Agent{PID: cmd.Process.Pid, StartTime: start, HealthAddr: health, MetricsAddr: metrics, Kubeconfig: kubeconfig, Log: logPath}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	err = cli.Poll(ctx, 250*time.Millisecond, 60*time.Second, "annex-agent of "+c.Name()+" to be ready", func(ctx context.Context) (bool, error) {
		select {
		case err := <-exited:
			return false, fmt.Errorf("annex-agent exited (%v); see %s", err, logPath)
		default:
		}
		return a.Ready(ctx), nil
	})
	if err != nil {
		_ = a.Stop()
		return nil, err
	}
	if err := writeJSON(filepath.Join(c.Dir(), "agent.json"), a); err != nil {
		_ = a.Stop()
		return nil, err
	}
	return a, nil
}

// LoadAgent reads the agent record of the cluster in dir.
func LoadAgent(dir string) (*Agent, error) {
	data, err := os.ReadFile(filepath.Join(dir, "agent.json"))
	if err != nil {
		return nil, err
	}
	a := &Agent{}
	return a, json.Unmarshal(data, a)
}

// Running reports whether the recorded process is still this agent.
func (a *Agent) Running() bool {
	return localcluster.ProcessAlive(a.PID, a.StartTime)
}

// Ready reports whether the agent's /readyz answers 200.
func (a *Agent) Ready(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.HealthAddr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Stop terminates the agent: SIGTERM, then SIGKILL after 10 s.
func (a *Agent) Stop() error {
	if !a.Running() {
		return nil
	}
	_ = syscall.Kill(a.PID, syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if !a.Running() {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	// It may have exited since the last look (ESRCH): stopped all the same.
	if err := syscall.Kill(a.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill agent (pid %d): %w", a.PID, err)
	}
	return nil
}

// writeAgentKubeconfig requests a bound token for the agent's ServiceAccount
// and writes <dir>/agent.kubeconfig with it.
func writeAgentKubeconfig(ctx context.Context, c *localcluster.Cluster, ttl time.Duration) (string, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return "", err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	secs := int64(ttl.Seconds())
	tr, err := cs.CoreV1().ServiceAccounts(corev1alpha1.AgentNamespace).CreateToken(ctx, AgentServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request a token for ServiceAccount %s/%s: %w", corev1alpha1.AgentNamespace, AgentServiceAccount, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[c.Name()] = &clientcmdapi.Cluster{Server: c.APIServerURL(), CertificateAuthorityData: c.CA()}
	kc.AuthInfos[AgentServiceAccount] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[c.Name()] = &clientcmdapi.Context{Cluster: c.Name(), AuthInfo: AgentServiceAccount, Namespace: corev1alpha1.AgentNamespace}
	kc.CurrentContext = c.Name()
	path := filepath.Join(c.Dir(), "agent.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", err
	}
	return path, nil
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

var errNotUp = errors.New("the sandbox is not up")
