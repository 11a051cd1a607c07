package localcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"
)

// refresh reloads state.json: another Cluster value (in this or another
// process, see Load) may have restarted a component since.
func (c *Cluster) refresh() {
	st, err := readState(c.dir)
	if err != nil || st.Name != c.st.Name {
		return
	}
	c.mu.Lock()
	c.st = *st
	c.mu.Unlock()
}

// Status reports each component's process, in start order.
func (c *Cluster) Status() []ComponentStatus {
	c.refresh()
	c.mu.Lock()
	comps := slices.Clone(c.st.Components)
	c.mu.Unlock()
	out := make([]ComponentStatus, 0, len(comps))
	for _, cs := range comps {
		s := ComponentStatus{Name: cs.Name, PID: cs.PID, State: Dead}
		switch stateOf(cs.PID, cs.StartTime) {
		case procRunning:
			s.State = Running
		case procPaused:
			s.State = Paused
		}
		out = append(out, s)
	}
	return out
}

// Stop stops every component: SIGTERM (and SIGCONT for a paused one), then
// SIGKILL for whatever is still there after a few seconds, and waits until
// the processes are gone. It deletes nothing from Dir. Calling it again is
// a no-op.
func (c *Cluster) Stop(ctx context.Context) error {
	c.refresh()
	c.mu.Lock()
	comps := slices.Clone(c.st.Components)
	c.mu.Unlock()
	slices.Reverse(comps)
	// etcd last, so the API server does not hang on its storage while
	// shutting down.
	var first, last []componentState
	for _, cs := range comps {
		if cs.Name == Etcd {
			last = append(last, cs)
		} else {
			first = append(first, cs)
		}
	}
	var errs []error
	for _, group := range [][]componentState{first, last} {
		if err := c.stopProcesses(ctx, group); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		// The real nodes' processes are gone, and with them their
		// namespaces, mounts and devices; their cgroups are left.
		if err := c.cleanupRealNodes(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stopProcesses terminates a group of components together.
func (c *Cluster) stopProcesses(ctx context.Context, comps []componentState) error {
	var alive []componentState
	for _, cs := range comps {
		if err := signalComponent(cs, syscall.SIGTERM); err == nil {
			_ = signalComponent(cs, syscall.SIGCONT)
			alive = append(alive, cs)
		}
	}
	grace, cancel := context.WithTimeout(ctx, stopGrace)
	defer cancel()
	var still []componentState
	for _, cs := range alive {
		if c.waitDead(grace, cs) != nil {
			still = append(still, cs)
		}
	}
	var errs []error
	for _, cs := range still {
		if err := signalComponent(cs, syscall.SIGKILL); err != nil && !errors.Is(err, errNotRunning) {
			errs = append(errs, fmt.Errorf("kill %s (pid %d): %w", cs.Name, cs.PID, err))
		}
	}
	// SIGKILL cannot be ignored; this bound only guards against a process
	// stuck in the kernel.
	killed, cancelKill := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelKill()
	for _, cs := range still {
		if err := c.waitDead(killed, cs); err != nil {
			errs = append(errs, fmt.Errorf("%s (pid %d) still alive after SIGKILL", cs.Name, cs.PID))
		}
	}
	return errors.Join(errs...)
}

// waitDead waits until a component's process is gone (and reaped, if this
// process started it), and the program it ran in a real node too.
func (c *Cluster) waitDead(ctx context.Context, cs componentState) error {
	c.mu.Lock()
	child := c.children[cs.Name]
	c.mu.Unlock()
	if child != nil && child.pid == cs.PID {
		select {
		case <-child.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	} else if err := waitState(ctx, cs.PID, cs.StartTime, nil, procDead); err != nil {
		return err
	}
	if cs.ChildPID != 0 {
		return waitState(ctx, cs.ChildPID, cs.ChildStartTime, nil, procDead)
	}
	return nil
}

// signalComponent signals a component's process group and, for a process
// of a real node, the program nsenter runs there (in nsenter's group unless
// nsenter is gone). errNotRunning means neither runs.
func signalComponent(cs componentState, sig syscall.Signal) error {
	err := signal(cs.PID, cs.StartTime, sig)
	if cs.ChildPID == 0 {
		return err
	}
	cerr := signal(cs.ChildPID, cs.ChildStartTime, sig)
	switch {
	case err == nil || cerr == nil:
		return nil // at least one got it
	case errors.Is(err, errNotRunning):
		return cerr // errNotRunning if both are gone
	default:
		return err
	}
}

// apiServer is the API server's current process entry.
func (c *Cluster) apiServer() (componentState, error) {
	c.refresh()
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := c.st.component(APIServer)
	if cs == nil {
		return componentState{}, errors.New("localcluster: cluster has no API server")
	}
	return *cs, nil
}

// KillAPIServer kills the API server with SIGKILL (a dead peer: connections
// are refused) and waits until it is gone. Killing a dead one is a no-op.
func (c *Cluster) KillAPIServer() error {
	cs, err := c.apiServer()
	if err != nil {
		return err
	}
	if err := signal(cs.PID, cs.StartTime, syscall.SIGKILL); err != nil {
		if errors.Is(err, errNotRunning) {
			return nil
		}
		return fmt.Errorf("localcluster: kill API server: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.waitDead(ctx, cs); err != nil {
		return fmt.Errorf("localcluster: API server (pid %d) still alive after SIGKILL", cs.PID)
	}
	return nil
}

// PauseAPIServer stops the API server with SIGSTOP (a hung peer: connections
// are accepted by the kernel but never answered) and waits until it is
// stopped. Pausing a paused one is a no-op.
func (c *Cluster) PauseAPIServer() error {
	cs, err := c.apiServer()
	if err != nil {
		return err
	}
	if err := signal(cs.PID, cs.StartTime, syscall.SIGSTOP); err != nil {
		if errors.Is(err, errNotRunning) {
			return errors.New("localcluster: pause API server: it is not running")
		}
		return fmt.Errorf("localcluster: pause API server: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := waitState(ctx, cs.PID, cs.StartTime, nil, procPaused); err != nil {
		return fmt.Errorf("localcluster: API server (pid %d) did not stop: %w", cs.PID, err)
	}
	return nil
}

// ResumeAPIServer undoes PauseAPIServer (SIGCONT) or KillAPIServer
// (restarts it with the same port and arguments) and waits until it is ready.
// After a restart the components watching it restart too, see
// restartWatchers.
func (c *Cluster) ResumeAPIServer(ctx context.Context) error {
	cs, err := c.apiServer()
	if err != nil {
		return err
	}
	switch stateOf(cs.PID, cs.StartTime) {
	case procPaused:
		if err := signal(cs.PID, cs.StartTime, syscall.SIGCONT); err != nil {
			return fmt.Errorf("localcluster: resume API server: %w", err)
		}
		return c.awaitAPIServer(ctx)
	case procDead:
		if err := c.respawn(cs); err != nil {
			return fmt.Errorf("localcluster: restart API server: %w", err)
		}
		if err := c.awaitAPIServer(ctx); err != nil {
			return err
		}
		return c.restartWatchers(ctx)
	}
	return c.awaitAPIServer(ctx)
}

// restartWatchers restarts the components that watch the API server
// (controller-manager, scheduler, kwok, the real nodes' kube-proxies and
// kube-routers, metrics-server) after it came back from the dead. Kubelets are not restarted: a restarted
// kubelet reports every pod with a readiness probe NotReady until the probe
// passes again, so Services would lose their endpoints for a moment; and a
// real provider's kubelets do not restart with its API server either.
// Their watches are client-go reflectors: after an outage of a few tens of
// seconds their backoff reaches 30 s, so a pod created right after the
// restart would wait up to a minute to be scheduled and run. Fresh processes
// list at once; no state is lost (it all lives in the API server).
func (c *Cluster) restartWatchers(ctx context.Context) error {
	c.refresh()
	c.mu.Lock()
	var comps []componentState
	names := []string{ControllerManager, Scheduler, Kwok}
	for _, n := range c.RealNodeNames() {
		names = append(names, NodeComponent(KubeProxy, n), NodeComponent(KubeRouter, n), NodeComponent(MetricsServer, n))
	}
	for _, name := range names {
		if cs := c.st.component(name); cs != nil {
			comps = append(comps, *cs)
		}
	}
	c.mu.Unlock()
	if err := c.stopProcesses(ctx, comps); err != nil {
		return fmt.Errorf("localcluster: restart after the API server: %w", err)
	}
	for _, cs := range comps {
		if err := c.respawn(cs); err != nil {
			return fmt.Errorf("localcluster: restart %s: %w", cs.Name, err)
		}
	}
	return nil
}

// RestartAPIServer stops the API server (SIGTERM, SIGKILL after a bound),
// starts it again with the same port and arguments, waits until it is
// ready, and restarts the components watching it (see restartWatchers).
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	cs, err := c.apiServer()
	if err != nil {
		return err
	}
	if err := c.stopProcesses(ctx, []componentState{cs}); err != nil {
		return fmt.Errorf("localcluster: restart API server: %w", err)
	}
	if err := c.respawn(cs); err != nil {
		return fmt.Errorf("localcluster: restart API server: %w", err)
	}
	if err := c.awaitAPIServer(ctx); err != nil {
		return err
	}
	return c.restartWatchers(ctx)
}

// awaitAPIServer waits for /readyz after a resume or restart.
func (c *Cluster) awaitAPIServer(ctx context.Context) error {
	probe, err := c.probeClient()
	if err != nil {
		return err
	}
	err = c.await(ctx, APIServer, []string{APIServer}, func(ctx context.Context) error {
		return probeGet(ctx, probe, c.APIServerURL()+"/readyz")
	})
	if err != nil {
		return fmt.Errorf("localcluster %s: %w", c.st.Name, err)
	}
	return nil
}

// respawn starts a component again exactly as recorded. A process of a real
// node runs in that node again (which must still run).
func (c *Cluster) respawn(cs componentState) error {
	if strings.HasPrefix(cs.Name, NodeInit+"@") || cs.Name == NodeNetwork {
		return fmt.Errorf("%s cannot be restarted alone: stop and start the cluster", cs.Name)
	}
	if strings.Contains(cs.Name, "@") {
		return c.launchInNode(cs)
	}
	c.mu.Lock()
	detach := c.st.Detach
	c.mu.Unlock()
	p, err := spawn(spawnSpec{name: cs.Name, binary: cs.Binary, args: cs.Args, logPath: cs.Log, detach: detach})
	if err != nil {
		return err
	}
	cs.PID, cs.StartTime = p.pid, p.startTime
	return c.record(cs, p)
}
