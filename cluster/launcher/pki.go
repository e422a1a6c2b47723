package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// keyPair is a certificate and its key, parsed and PEM-encoded.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// certSpec is what a certificate says; the issuer (nil: self-signed) signs it.
type certSpec struct {
	cn    string
	orgs  []string
	dns   []string
	ips   []net.IP
	isCA  bool
	usage []x509.ExtKeyUsage
	// rsaPKCS1 asks for an RSA key in PKCS#1 PEM instead of ECDSA P-256: the form
	// training-operator's cert rotator (open-policy-agent/cert-controller) parses a CA key in.
	rsaPKCS1 bool
}

// The cluster lives for a test session, but operators' cert rotators renew a certificate that
// expires within 90 days: two years keeps them from replacing ours.
const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 2 * 365 * 24 * time.Hour
)

func newKeyPair(spec certSpec, issuer *keyPair) (*keyPair, error) {
	var key crypto.Signer
	var keyPEM []byte
	if spec.rsaPKCS1 {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		key = k
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	} else {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return nil, err
		}
		key = k
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: spec.cn, Organization: spec.orgs},
		DNSNames:              spec.dns,
		IPAddresses:           spec.ips,
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(leafLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           spec.usage,
		BasicConstraintsValid: true,
	}
	if spec.isCA {
		tmpl.IsCA = true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.NotAfter = now.Add(caLifetime)
	}
	parent, signer := tmpl, key
	if issuer != nil {
		parent, signer = issuer.cert, issuer.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return nil, fmt.Errorf("certificate %s: %w", spec.cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM: keyPEM}, nil
}

// write stores the pair as <dir>/<name>.crt and <name>.key.
func (p *keyPair) write(dir, name string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, p.certPEM, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, p.keyPEM, 0o600)
}

var loopback = []net.IP{net.IPv4(127, 0, 0, 1)}

func serving(cn string, dns ...string) certSpec {
	return certSpec{cn: cn, dns: append([]string{"localhost"}, dns...), ips: loopback, usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
}

func client(user string, groups ...string) certSpec {
	return certSpec{cn: user, orgs: groups, usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
}

// writeKubeconfig writes a kubeconfig for one identity (a client certificate of the CA) with
// everything embedded, so the file alone reaches the cluster.
func writeKubeconfig(path, server string, ca, id *keyPair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["elastic-compile"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca.certPEM}
	cfg.AuthInfos["elastic-compile"] = &clientcmdapi.AuthInfo{ClientCertificateData: id.certPEM, ClientKeyData: id.keyPEM}
	cfg.Contexts["elastic-compile"] = &clientcmdapi.Context{Cluster: "elastic-compile", AuthInfo: "elastic-compile", Namespace: "default"}
	cfg.CurrentContext = "elastic-compile"
	return clientcmd.WriteToFile(*cfg, path)
}
