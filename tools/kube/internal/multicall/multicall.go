// Package multicall chooses which of the commands linked into one binary to
// run: by the name the binary was invoked by (a symlink such as
// bin/kube-apiserver → kube), or by the first argument (`kube kube-apiserver
// --help`). It owns only that choice; the commands themselves are wired in
// cmd/kube, and tools/kube links each of Commands to that binary.
package multicall

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Commands are the commands the kube binary (cmd/kube) holds: tools/kube
// makes a symlink named after each, and cmd/kube runs the one it is invoked as.
var Commands = []string{
	"etcd",
	"kube-apiserver",
	"kube-controller-manager",
	"kube-scheduler",
	"kubectl",
	"kubelet",
	"kube-proxy",
	// internal/localcluster's helper processes for real nodes.
	"localcluster-proxy",
}

// Resolve returns the command to run for the command line args (os.Args)
// and the command line that command must see, whose first element is the
// command's name. names are the commands the binary holds.
//
// The base name of args[0] wins when it is one of names; otherwise args[1]
// must be one. Anything else is an error that lists names, meant for the
// user.
func Resolve(args, names []string) (name string, cmdArgs []string, err error) {
	if len(args) == 0 {
		return "", nil, fmt.Errorf("no command line")
	}
	if base := filepath.Base(args[0]); slices.Contains(names, base) {
		return base, args, nil
	}
	if len(args) > 1 && slices.Contains(names, args[1]) {
		return args[1], args[1:], nil
	}
	return "", nil, fmt.Errorf("%s", Usage(filepath.Base(args[0]), names))
}

// Usage explains how to invoke the binary named self holding names.
func Usage(self string, names []string) string {
	return fmt.Sprintf("%[1]s holds several commands; run one through a symlink named after it, or as `%[1]s <command> [args...]`.\ncommands: %[2]s",
		self, strings.Join(names, ", "))
}
