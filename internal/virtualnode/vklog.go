package virtualnode

import (
	"fmt"

	"github.com/go-logr/logr"
	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
)

// vkLogger adapts a logr.Logger to virtual-kubelet's log.Logger, which its
// controllers take from their context. Debug, Info and Warn go to V(1):
// virtual-kubelet logs every pod it syncs, and warns at every retry of a
// postponed deletion. Its errors are logged as information with
// vkLevel=error: most are expected here (a deletion postponed while the
// provider is unreachable, a pod already gone), and the reflector logs its
// own failures. Fatal never exits.
type vkLogger struct {
	l logr.Logger
}

var _ vklog.Logger = vkLogger{}

func (v vkLogger) Debug(args ...any) { v.l.V(1).Info(fmt.Sprint(args...)) }
func (v vkLogger) Debugf(f string, args ...any) {
	v.l.V(1).Info(fmt.Sprintf(f, args...))
}
func (v vkLogger) Info(args ...any)            { v.l.V(1).Info(fmt.Sprint(args...)) }
func (v vkLogger) Infof(f string, args ...any) { v.l.V(1).Info(fmt.Sprintf(f, args...)) }
func (v vkLogger) Warn(args ...any)            { v.l.V(1).Info(fmt.Sprint(args...)) }
func (v vkLogger) Warnf(f string, args ...any) { v.l.V(1).Info(fmt.Sprintf(f, args...)) }
func (v vkLogger) Error(args ...any)           { v.l.Info(fmt.Sprint(args...), "vkLevel", "error") }
func (v vkLogger) Errorf(f string, args ...any) {
	v.l.Info(fmt.Sprintf(f, args...), "vkLevel", "error")
}
func (v vkLogger) Fatal(args ...any)            { v.Error(args...) }
func (v vkLogger) Fatalf(f string, args ...any) { v.Errorf(f, args...) }
func (v vkLogger) WithField(k string, val any) vklog.Logger {
	return vkLogger{l: v.l.WithValues(k, val)}
}
func (v vkLogger) WithError(err error) vklog.Logger {
	return vkLogger{l: v.l.WithValues("error", fmt.Sprint(err))}
}
func (v vkLogger) WithFields(f vklog.Fields) vklog.Logger {
	kv := make([]any, 0, 2*len(f))
	for k, val := range f {
		kv = append(kv, k, val)
	}
	return vkLogger{l: v.l.WithValues(kv...)}
}
