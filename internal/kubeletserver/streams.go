package kubeletserver

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	vkapi "github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/ptr"
)

// containerLogs streams the remote pod's container log from the provider
// (virtual-kubelet's ContainerLogsHandlerFunc). The wait for the provider's
// answer is bounded; the stream then lasts until it ends or ctx (the
// client's request) does.
func (s *Server) containerLogs(ctx context.Context, _, _, container string, o vkapi.ContainerLogOpts) (io.ReadCloser, error) {
	t, err := targetFrom(ctx)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(t.Config)
	if err != nil {
		return nil, err
	}
	req := cs.CoreV1().Pods(t.RemoteNamespace).GetLogs(t.Pod, logOptions(container, o))
	ctx, cancel := context.WithCancel(ctx)
	timer := s.clock.AfterFunc(s.connectTimeout, cancel)
	stream, err := req.Stream(ctx)
	if !timer.Stop() {
		if stream != nil {
			stream.Close()
		}
		cancel()
		return nil, s.failed(t, "logs", fmt.Errorf("provider %s did not answer within %s", t.ProviderID, s.connectTimeout))
	}
	if err != nil {
		cancel()
		return nil, s.failed(t, "logs", remoteError(t, err))
	}
	return &cancelOnClose{ReadCloser: stream, cancel: cancel}, nil
}

// logOptions translates the kubelet API's log options into pods/log's.
func logOptions(container string, o vkapi.ContainerLogOpts) *corev1.PodLogOptions {
	opts := &corev1.PodLogOptions{
		Container:  container,
		Follow:     o.Follow,
		Previous:   o.Previous,
		Timestamps: o.Timestamps,
	}
	if o.Tail > 0 {
		opts.TailLines = ptr.To(int64(o.Tail))
	}
	if o.LimitBytes > 0 {
		opts.LimitBytes = ptr.To(int64(o.LimitBytes))
	}
	if o.SinceSeconds > 0 {
		opts.SinceSeconds = ptr.To(int64(o.SinceSeconds))
	}
	if !o.SinceTime.IsZero() {
		opts.SinceTime = ptr.To(metav1.NewTime(o.SinceTime))
	}
	return opts
}

// cancelOnClose releases the stream's context when the stream is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	defer c.cancel()
	return c.ReadCloser.Close()
}

// runInContainer runs a command in the remote pod's container through the
// provider's pods/exec (virtual-kubelet's ContainerExecHandlerFunc), over
// WebSocket or, with older API servers, SPDY, as kubectl does. The provider
// must first answer a read of the pod within the connect timeout; the
// session then lasts until the command ends or ctx (the client's request)
// does. The command's exit code is passed on.
func (s *Server) runInContainer(ctx context.Context, _, _, container string, cmd []string, attach vkapi.AttachIO) error {
	t, err := targetFrom(ctx)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(t.Config)
	if err != nil {
		return err
	}
	getCtx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	_, err = cs.CoreV1().Pods(t.RemoteNamespace).Get(getCtx, t.Pod, metav1.GetOptions{})
	cancel()
	if err != nil {
		return s.failed(t, "exec", remoteError(t, err))
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.RemoteNamespace).Name(t.Pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container,
			Command:   cmd,
			Stdin:     attach.Stdin() != nil,
			Stdout:    attach.Stdout() != nil,
			Stderr:    attach.Stderr() != nil,
			TTY:       attach.TTY(),
		}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(t.Config, http.MethodPost, req.URL())
	if err != nil {
		return err
	}
	ws, err := remotecommand.NewWebSocketExecutor(t.Config, http.MethodGet, req.URL().String())
	if err != nil {
		return err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	opts := remotecommand.StreamOptions{Tty: attach.TTY()}
	// Only set the streams that exist: a nil io.WriteCloser must not
	// become a non-nil io.Writer.
	if in := attach.Stdin(); in != nil {
		opts.Stdin = in
	}
	if out := attach.Stdout(); out != nil {
		opts.Stdout = out
	}
	if errOut := attach.Stderr(); errOut != nil {
		opts.Stderr = errOut
	}
	if attach.TTY() && attach.Resize() != nil {
		opts.TerminalSizeQueue = &sizeQueue{ctx: ctx, ch: attach.Resize()}
	}
	err = exec.StreamWithContext(ctx, opts)
	if _, ok := err.(utilexec.ExitError); ok {
		return err // virtual-kubelet passes the exit code on only when unwrapped
	}
	if err != nil {
		return s.failed(t, "exec", remoteError(t, err))
	}
	return nil
}

// sizeQueue feeds terminal resizes to the remote session.
type sizeQueue struct {
	ctx context.Context
	ch  <-chan vkapi.TermSize
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case s, ok := <-q.ch:
		if !ok {
			return nil
		}
		return &remotecommand.TerminalSize{Width: s.Width, Height: s.Height}
	case <-q.ctx.Done():
		return nil
	}
}

// failed logs a request the provider could not serve (virtual-kubelet's
// handlers do not log) and returns err.
func (s *Server) failed(t *target, request string, err error) error {
	s.log.Info("Kubelet request failed", "request", request, "pod", t.Namespace+"/"+t.Pod, "provider", t.ProviderID, "error", err.Error())
	return err
}

// remoteError says which provider failed; not-found and bad-request
// answers keep their meaning (virtual-kubelet answers 404 and 400).
func remoteError(t *target, err error) error {
	err = fmt.Errorf("provider %s, pod %s/%s: %w", t.ProviderID, t.RemoteNamespace, t.Pod, err)
	switch {
	case apierrors.IsNotFound(err):
		return errdefs.AsNotFound(err)
	case apierrors.IsBadRequest(err):
		return errdefs.AsInvalidInput(err)
	}
	return err
}
