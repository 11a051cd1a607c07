package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Validity of the certificates this package issues. Local clusters are
// short-lived, but a sandbox may stay up for days.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// clockSkew back-dates NotBefore so a certificate is valid immediately
	// even if clocks disagree slightly.
	clockSkew = time.Hour
)

// authority is the cluster's certificate authority: it signs every serving
// and client certificate of the cluster.
type authority struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

// certRequest describes one leaf certificate to issue.
type certRequest struct {
	commonName   string
	organization []string
	dnsNames     []string
	ips          []net.IP
	usages       []x509.ExtKeyUsage
}

// newAuthority creates a self-signed ECDSA P-256 CA named after the cluster.
func newAuthority(clusterName string, now time.Time) (*authority, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: clusterName + "-ca", Organization: []string{"annex localcluster"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return &authority{cert: cert, key: key, certPEM: encodeCert(der)}, keyPEM, nil
}

// parseAuthority loads a CA from its PEM certificate and key.
func parseAuthority(certPEM, keyPEM []byte) (*authority, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("CA certificate: no CERTIFICATE PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	key, err := decodeKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	return &authority{cert: cert, key: key, certPEM: certPEM}, nil
}

// issue signs a new leaf certificate and returns it with its private key,
// both PEM encoded.
func (a *authority) issue(req certRequest, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: req.commonName, Organization: req.organization},
		DNSNames:              req.dnsNames,
		IPAddresses:           req.ips,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(leafValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           req.usages,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return encodeCert(der), keyPEM, nil
}

// clientCert is the request for a client certificate authenticating as user
// with the given groups (the certificate's organizations).
func clientCert(user string, groups ...string) certRequest {
	return certRequest{
		commonName:   user,
		organization: groups,
		usages:       []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// loopbackServing is the request for a certificate that serves on
// 127.0.0.1/localhost and also authenticates as user (controller-manager and
// scheduler use one certificate for both).
func loopbackServing(user string, groups ...string) certRequest {
	return certRequest{
		commonName:   user,
		organization: groups,
		dnsNames:     []string{"localhost"},
		ips:          []net.IP{net.IPv4(127, 0, 0, 1)},
		usages:       []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
}

// apiServerServing is the request for the API server's serving certificate:
// valid for loopback and for the in-cluster names and IP of the kubernetes
// Service.
func apiServerServing(serviceCIDR string) (certRequest, error) {
	svcIP, err := firstServiceIP(serviceCIDR)
	if err != nil {
		return certRequest{}, err
	}
	return certRequest{
		commonName: "kube-apiserver",
		dnsNames: []string{
			"localhost",
			"kubernetes",
			"kubernetes.default",
			"kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local",
		},
		ips:    []net.IP{net.IPv4(127, 0, 0, 1), svcIP},
		usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, nil
}

// firstServiceIP is the first usable address of the service CIDR: the
// ClusterIP the API server gives the `kubernetes` Service.
func firstServiceIP(serviceCIDR string) (net.IP, error) {
	ip, ipnet, err := net.ParseCIDR(serviceCIDR)
	if err != nil {
		return nil, fmt.Errorf("service CIDR: %w", err)
	}
	ip4 := ip.Mask(ipnet.Mask).To4()
	if ip4 == nil {
		return nil, fmt.Errorf("service CIDR %s: only IPv4 is supported", serviceCIDR)
	}
	ones, bits := ipnet.Mask.Size()
	if bits-ones < 2 {
		return nil, fmt.Errorf("service CIDR %s is too small", serviceCIDR)
	}
	first := make(net.IP, len(ip4))
	copy(first, ip4)
	first[3]++
	return first, nil
}

// newServiceAccountKey creates the key pair the API server signs and verifies
// service-account tokens with.
func newServiceAccountKey() (privPEM, pubPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	privPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, err
	}
	return privPEM, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), nil
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func decodeKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	switch block.Type {
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported key type %T", k)
		}
		return s, nil
	default:
		return nil, fmt.Errorf("unsupported PEM block %q", block.Type)
	}
}

// pkiFiles are the paths of the cluster's PKI under <dir>/pki.
type pkiFiles struct{ dir string }

func (p pkiFiles) path(name string) string { return filepath.Join(p.dir, name) }

func (p pkiFiles) caCert() string       { return p.path("ca.crt") }
func (p pkiFiles) caKey() string        { return p.path("ca.key") }
func (p pkiFiles) saKey() string        { return p.path("sa.key") }
func (p pkiFiles) saPub() string        { return p.path("sa.pub") }
func (p pkiFiles) cert(n string) string { return p.path(n + ".crt") }
func (p pkiFiles) key(n string) string  { return p.path(n + ".key") }

// loadOrCreateAuthority reuses the CA and service-account key already in the
// state directory (so tokens and kubeconfigs stay valid across restarts of a
// cluster in the same directory) or creates them.
func loadOrCreateAuthority(files pkiFiles, clusterName string, now time.Time) (*authority, error) {
	if err := os.MkdirAll(files.dir, 0o700); err != nil {
		return nil, err
	}
	var ca *authority
	certPEM, errCert := os.ReadFile(files.caCert())
	keyPEM, errKey := os.ReadFile(files.caKey())
	if errCert == nil && errKey == nil {
		var err error
		if ca, err = parseAuthority(certPEM, keyPEM); err != nil {
			return nil, fmt.Errorf("%s: %w", files.dir, err)
		}
	} else {
		var err error
		if ca, keyPEM, err = newAuthority(clusterName, now); err != nil {
			return nil, err
		}
		if err := writeFileAtomic(files.caKey(), keyPEM, 0o600); err != nil {
			return nil, err
		}
		if err := writeFileAtomic(files.caCert(), ca.certPEM, 0o644); err != nil {
			return nil, err
		}
	}
	_, errPriv := os.Stat(files.saKey())
	_, errPub := os.Stat(files.saPub())
	if errPriv != nil || errPub != nil {
		priv, pub, err := newServiceAccountKey()
		if err != nil {
			return nil, err
		}
		if err := writeFileAtomic(files.saKey(), priv, 0o600); err != nil {
			return nil, err
		}
		if err := writeFileAtomic(files.saPub(), pub, 0o644); err != nil {
			return nil, err
		}
	}
	return ca, nil
}

// issueToFiles issues a leaf certificate and writes it as <name>.crt and
// <name>.key in the PKI directory, returning the PEM data too.
func (a *authority) issueToFiles(files pkiFiles, name string, req certRequest, now time.Time) (certPEM, keyPEM []byte, err error) {
	certPEM, keyPEM, err = a.issue(req, now)
	if err != nil {
		return nil, nil, fmt.Errorf("issue %s certificate: %w", name, err)
	}
	if err := writeFileAtomic(files.key(name), keyPEM, 0o600); err != nil {
		return nil, nil, err
	}
	if err := writeFileAtomic(files.cert(name), certPEM, 0o644); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}
