package remote

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// RESTConfigFromKubeconfig builds the rest.Config of the current context of
// a kubeconfig held in a Secret. The kubeconfig must be self-contained: it
// is refused, before anything is read or run, if its current context names
// local files (certificate, key, CA or token files) or an exec or
// auth-provider plugin, since whoever can write the Secret could otherwise
// make the agent send its own files to a server of their choosing or run
// commands.
func RESTConfigFromKubeconfig(data []byte) (*rest.Config, error) {
	if len(data) == 0 {
		return nil, errors.New("empty kubeconfig")
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("invalid kubeconfig: %w", err)
	}
	if err := checkSelfContained(kc); err != nil {
		return nil, fmt.Errorf("kubeconfig refused: %w", err)
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*kc, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("invalid kubeconfig: %w", err)
	}
	return cfg, nil
}

// checkSelfContained checks the current context of kc.
func checkSelfContained(kc *clientcmdapi.Config) error {
	ctx, ok := kc.Contexts[kc.CurrentContext]
	if !ok {
		return fmt.Errorf("current context %q not found", kc.CurrentContext)
	}
	var errs []error
	files := map[string]string{}
	if c, ok := kc.Clusters[ctx.Cluster]; ok {
		if c.Server == "" {
			errs = append(errs, fmt.Errorf("cluster %q has no server", ctx.Cluster))
		}
		files["certificate-authority"] = c.CertificateAuthority
	} else {
		errs = append(errs, fmt.Errorf("cluster %q not found", ctx.Cluster))
	}
	if u, ok := kc.AuthInfos[ctx.AuthInfo]; ok {
		if u.Exec != nil {
			errs = append(errs, errors.New("exec credential plugins are not allowed"))
		}
		if u.AuthProvider != nil {
			errs = append(errs, errors.New("auth-provider plugins are not allowed"))
		}
		files["client-certificate"] = u.ClientCertificate
		files["client-key"] = u.ClientKey
		files["tokenFile"] = u.TokenFile
	}
	for _, field := range []string{"certificate-authority", "client-certificate", "client-key", "tokenFile"} {
		if path := files[field]; path != "" {
			errs = append(errs, fmt.Errorf("%s names a local file (%s); embed the data instead", field, path))
		}
	}
	return errors.Join(errs...)
}
