package kubeletserver

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"
)

// DefaultPort is the port of the kubelet endpoint when --kubelet-port is
// not given: a kubelet's.
const DefaultPort = 10250

// Options configure the kubelet endpoint.
type Options struct {
	// Port is the TCP port the endpoint listens on (on the virtual nodes'
	// IP) and the virtual nodes advertise; 0 disables the endpoint.
	Port int
	// CertFile and KeyFile are an operator-provided serving certificate
	// and key (reloaded when the files change). When both are empty the
	// agent obtains its certificate through the CertificateSigningRequest
	// API (signer kubernetes.io/kubelet-serving) and renews it.
	CertFile, KeyFile string
}

// DefaultOptions returns the settings used when a flag is not given.
func DefaultOptions() Options {
	return Options{Port: DefaultPort}
}

// BindFlags registers the options on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Port, "kubelet-port", o.Port,
		"port of the virtual nodes' kubelet endpoint (kubectl logs and exec of offloaded pods), served on --virtual-node-ip; 0 disables it")
	fs.StringVar(&o.CertFile, "kubelet-cert-file", o.CertFile,
		"serving certificate of the kubelet endpoint (PEM, valid for --virtual-node-ip, signed by a CA the API server trusts for kubelets); default: one issued through a CertificateSigningRequest with signer kubernetes.io/kubelet-serving")
	fs.StringVar(&o.KeyFile, "kubelet-key-file", o.KeyFile,
		"private key of --kubelet-cert-file")
}

// Validate reports every invalid option.
func (o *Options) Validate() error {
	var errs []error
	if o.Port < 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("--kubelet-port must be between 0 and 65535, got %d", o.Port))
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		errs = append(errs, errors.New("--kubelet-cert-file and --kubelet-key-file must be given together"))
	}
	return errors.Join(errs...)
}

// Enabled reports whether the endpoint is served.
func (o *Options) Enabled() bool { return o.Port != 0 }
