package kubeletserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	vkapi "github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
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
// provider's pods/exec (virtual-kubelet's ContainerExecHandlerFunc). The
// command's exit code is passed on.
func (s *Server) runInContainer(ctx context.Context, _, _, container string, cmd []string, attach vkapi.AttachIO) error {
	return s.stream(ctx, "exec", &corev1.PodExecOptions{
		Container: container,
		Command:   cmd,
		Stdin:     attach.Stdin() != nil,
		Stdout:    attach.Stdout() != nil,
		Stderr:    attach.Stderr() != nil,
		TTY:       attach.TTY(),
	}, attach)
}

// attachToContainer attaches to the remote pod's running container through
// the provider's pods/attach (virtual-kubelet's ContainerAttachHandlerFunc).
func (s *Server) attachToContainer(ctx context.Context, _, _, container string, attach vkapi.AttachIO) error {
	return s.stream(ctx, "attach", &corev1.PodAttachOptions{
		Container: container,
		Stdin:     attach.Stdin() != nil,
		Stdout:    attach.Stdout() != nil,
		Stderr:    attach.Stderr() != nil,
		TTY:       attach.TTY(),
	}, attach)
}

// stream runs a remote command session (subresource exec or attach of the
// remote pod, with opts) over WebSocket or, with older API servers, SPDY,
// as kubectl does. The provider must first answer a read of the pod within
// the connect timeout; the session then lasts until it ends or ctx (the
// client's request) does.
func (s *Server) stream(ctx context.Context, subresource string, opts runtime.Object, attach vkapi.AttachIO) error {
	t, err := targetFrom(ctx)
	if err != nil {
		return err
	}
	cs, err := s.reachPod(ctx, t, subresource)
	if err != nil {
		return err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.RemoteNamespace).Name(t.Pod).SubResource(subresource).
		VersionedParams(opts, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(t.Config, http.MethodPost, req.URL())
	if err != nil {
		return err
	}
	ws, err := remotecommand.NewWebSocketExecutor(t.Config, http.MethodGet, req.URL().String())
	if err != nil {
		return err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, shouldFallback)
	if err != nil {
		return err
	}
	so := remotecommand.StreamOptions{Tty: attach.TTY()}
	// Only set the streams that exist: a nil io.WriteCloser must not
	// become a non-nil io.Writer.
	if in := attach.Stdin(); in != nil {
		so.Stdin = in
	}
	if out := attach.Stdout(); out != nil {
		so.Stdout = out
	}
	if errOut := attach.Stderr(); errOut != nil {
		so.Stderr = errOut
	}
	if attach.TTY() && attach.Resize() != nil {
		so.TerminalSizeQueue = &sizeQueue{ctx: ctx, ch: attach.Resize()}
	}
	err = exec.StreamWithContext(ctx, so)
	if _, ok := err.(utilexec.ExitError); ok {
		return err // virtual-kubelet passes the exit code on only when unwrapped
	}
	if err != nil {
		return s.failed(t, subresource, remoteError(t, err))
	}
	return nil
}

// shouldFallback says when a WebSocket dial is retried over SPDY.
func shouldFallback(err error) bool {
	return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
}

// reachPod returns a client of the provider after it answered a read of
// the remote pod within the connect timeout.
func (s *Server) reachPod(ctx context.Context, t *target, request string) (kubernetes.Interface, error) {
	cs, err := kubernetes.NewForConfig(t.Config)
	if err != nil {
		return nil, err
	}
	getCtx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	_, err = cs.CoreV1().Pods(t.RemoteNamespace).Get(getCtx, t.Pod, metav1.GetOptions{})
	cancel()
	if err != nil {
		return nil, s.failed(t, request, remoteError(t, err))
	}
	return cs, nil
}

// forwardPort carries one port-forward connection (virtual-kubelet's
// PortForwardHandlerFunc: called once per connection the client opens) to
// port of the remote pod through the provider's pods/portforward, over
// WebSocket or SPDY as kubectl does. Connecting is bounded by the connect
// timeout; the connection then lasts until either side closes it or ctx
// ends. What the provider reports on the error stream (nothing listens on
// the port, ...) is returned.
func (s *Server) forwardPort(ctx context.Context, namespace, pod string, port int32, conn io.ReadWriteCloser) error {
	defer conn.Close()
	// virtual-kubelet calls this with a context of its own, not the
	// request's: resolve the pod again (serve authorized the request).
	t, err := targetFrom(ctx)
	if err != nil {
		if t, err = s.resolve(ctx, namespace, pod); err != nil {
			return err
		}
	}
	cs, err := s.reachPod(ctx, t, "port-forward")
	if err != nil {
		return err
	}
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.RemoteNamespace).Name(t.Pod).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(t.Config)
	if err != nil {
		return err
	}
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	if tunnel, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, t.Config); err == nil {
		dialer = portforward.NewFallbackDialerForStreaming(tunnel, dialer, shouldFallback)
	}
	type dialed struct {
		c   httpstream.Connection
		err error
	}
	done := make(chan dialed, 1)
	go func() {
		c, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
		done <- dialed{c, err}
	}()
	// closeLate closes the connection of a dial given up on, should it
	// still succeed.
	closeLate := func() {
		if d := <-done; d.c != nil {
			_ = d.c.Close()
		}
	}
	var remote httpstream.Connection
	timer := s.clock.NewTimer(s.connectTimeout)
	defer timer.Stop()
	select {
	case d := <-done:
		if d.err != nil {
			return s.failed(t, "port-forward", remoteError(t, d.err))
		}
		remote = d.c
	case <-timer.C():
		go closeLate()
		return s.failed(t, "port-forward", fmt.Errorf("provider %s did not answer within %s", t.ProviderID, s.connectTimeout))
	case <-ctx.Done():
		go closeLate()
		return ctx.Err()
	}
	defer func() { _ = remote.Close() }()

	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(int(port)))
	h.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := remote.CreateStream(h)
	if err != nil {
		return s.failed(t, "port-forward", remoteError(t, err))
	}
	_ = errStream.Close() // nothing is sent on it; the provider answers on it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := remote.CreateStream(h)
	if err != nil {
		return s.failed(t, "port-forward", remoteError(t, err))
	}
	defer func() { _ = data.Reset() }()

	remoteErr := make(chan error, 1)
	go func() {
		msg, err := io.ReadAll(io.LimitReader(errStream, maxPortForwardError))
		switch {
		case err != nil:
			remoteErr <- err
		case len(msg) > 0:
			remoteErr <- fmt.Errorf("provider %s, pod %s/%s, port %d: %s", t.ProviderID, t.RemoteNamespace, t.Pod, port, msg)
		default:
			remoteErr <- nil
		}
	}()
	toRemote := make(chan struct{})
	go func() {
		defer close(toRemote)
		_, _ = io.Copy(data, conn) // ends when the client closes its side
		_ = data.Close()           // half-close: the pod sees EOF
	}()
	fromRemote := make(chan struct{})
	go func() {
		defer close(fromRemote)
		_, _ = io.Copy(conn, data)
	}()
	select {
	case <-fromRemote:
	case <-ctx.Done():
		return nil
	case <-remote.CloseChan():
	}
	// The provider's verdict may arrive just after its data ends.
	timer2 := s.clock.NewTimer(errorStreamWait)
	defer timer2.Stop()
	select {
	case err := <-remoteErr:
		if err != nil {
			return s.failed(t, "port-forward", err)
		}
	case <-timer2.C():
	}
	return nil
}

// errorStreamWait bounds the wait for the provider's error stream after a
// forwarded connection's data ended.
const errorStreamWait = 2 * time.Second

// maxPortForwardError bounds what is read of a provider's error stream.
const maxPortForwardError = 4 << 10

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
