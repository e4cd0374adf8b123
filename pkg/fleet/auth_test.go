package fleet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/natstest"
)

// pki is a throwaway certificate authority with a certificate for a
// server on loopback and one for a client, as PEM files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newPKI(t *testing.T, name string) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " fleet CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	p := pki{ca: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.ca, "CERTIFICATE", caDER)
	issue := func(serial int64, usage x509.ExtKeyUsage, certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	}
	p.serverCert, p.serverKey = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	p.clientCert, p.clientKey = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	issue(2, x509.ExtKeyUsageServerAuth, p.serverCert, p.serverKey)
	issue(3, x509.ExtKeyUsageClientAuth, p.clientCert, p.clientKey)
	return p
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
}

// withServerTLS makes the server speak TLS only, with p's certificate,
// and ask for a client certificate of p's CA when verify is set.
func withServerTLS(t *testing.T, p pki, verify bool) natstest.Option {
	t.Helper()
	cfg, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: p.serverCert, KeyFile: p.serverKey, CaFile: p.ca, Verify: verify})
	require.NoError(t, err)
	return func(o *server.Options) {
		o.TLS, o.TLSVerify, o.TLSConfig, o.TLSTimeout = true, verify, cfg, 2
	}
}

func withTLSFiles(ca, cert, key string) func(*Options) {
	return func(o *Options) { o.CAFile, o.CertFile, o.KeyFile = ca, cert, key }
}

// clientCertRefused is what a client sees of a server refusing its
// certificate, or its lack of one. With TLS 1.3 the server checks it
// after the handshake: the client sees the server's alert, or only the
// connection closed, whichever reaches it first.
const clientCertRefused = "tls: (certificate required|bad certificate|unknown certificate authority)|tls error: connection closed by remote"

func TestTLS(t *testing.T) {
	fleetPKI, otherPKI := newPKI(t, "fleet"), newPKI(t, "other")
	tests := []struct {
		name   string
		verify bool
		client func(*Options)
		// wantErr matches Stats.Error when the client cannot connect.
		wantErr string
	}{
		{name: "the server's certificate is of the fleet's CA", client: withTLSFiles(fleetPKI.ca, "", "")},
		{name: "with a client certificate the server verifies", verify: true,
			client: withTLSFiles(fleetPKI.ca, fleetPKI.clientCert, fleetPKI.clientKey)},
		{name: "the server's certificate is of another CA", client: withTLSFiles(otherPKI.ca, "", ""),
			wantErr: "certificate signed by unknown authority"},
		{name: "a client certificate of another CA", verify: true,
			client:  withTLSFiles(fleetPKI.ca, otherPKI.clientCert, otherPKI.clientKey),
			wantErr: clientCertRefused},
		{name: "no client certificate where the server asks for one", verify: true,
			client: withTLSFiles(fleetPKI.ca, "", ""), wantErr: clientCertRefused},
		{name: "no CA: the system's do not know the fleet's", client: withTLSFiles("", "", ""),
			wantErr: "certificate signed by unknown authority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := natstest.Start(t, withServerTLS(t, fleetPKI, tt.verify))
			c := startClient(t, srv.URL(), "bus-1", tt.client)
			if publishesOrFails(t, c, tt.wantErr) {
				return
			}
			assert.Regexp(t, tt.wantErr, c.Stats().Error)
			assert.False(t, c.Stats().Connected)
		})
	}
}

func TestTLSFilesUnreadable(t *testing.T) {
	p := newPKI(t, "fleet")
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	tests := []struct {
		name string
		opts func(*Options)
		want string
	}{
		{"a CA file that holds no certificate", withTLSFiles(notPEM, "", ""), "failed to parse root certificate"},
		{"a key that is not the certificate's", withTLSFiles(p.ca, p.clientCert, p.serverKey), "private key does not match public key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{URL: "tls://127.0.0.1:1", Network: network, Host: "bus-1"}
			tt.opts(&opts)
			c, err := Open(opts)
			if c != nil {
				c.Close()
			}
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// operator is an operator-mode server's trust: an operator, the system
// account and the fleet's account with JetStream, as nsc would make them.
type operator struct {
	claims   *jwt.OperatorClaims
	resolver *server.MemAccResolver
	system   string
	fleet    nkeys.KeyPair
}

func newOperator(t *testing.T) operator {
	t.Helper()
	opKey, err := nkeys.CreateOperator()
	require.NoError(t, err)
	opPub, err := opKey.PublicKey()
	require.NoError(t, err)
	opJWT, err := jwt.NewOperatorClaims(opPub).Encode(opKey)
	require.NoError(t, err)
	o := operator{resolver: &server.MemAccResolver{}}
	o.claims, err = jwt.DecodeOperatorClaims(opJWT)
	require.NoError(t, err)
	account := func(jetStream bool) (nkeys.KeyPair, string) {
		key, err := nkeys.CreateAccount()
		require.NoError(t, err)
		pub, err := key.PublicKey()
		require.NoError(t, err)
		claims := jwt.NewAccountClaims(pub)
		if jetStream {
			claims.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		accJWT, err := claims.Encode(opKey)
		require.NoError(t, err)
		require.NoError(t, o.resolver.Store(pub, accJWT))
		return key, pub
	}
	_, o.system = account(false)
	o.fleet, _ = account(true)
	return o
}

func (o operator) option(o2 *server.Options) {
	o2.TrustedOperators = []*jwt.OperatorClaims{o.claims}
	o2.AccountResolver = o.resolver
	o2.SystemAccount = o.system
}

// creds writes a credentials file of a user of account.
func creds(t *testing.T, account nkeys.KeyPair) string {
	t.Helper()
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := user.PublicKey()
	require.NoError(t, err)
	userJWT, err := jwt.NewUserClaims(pub).Encode(account)
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	file, err := jwt.FormatUserConfig(userJWT, seed)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "bus.creds")
	require.NoError(t, os.WriteFile(path, file, 0o600))
	return path
}

func withCreds(path string) func(*Options) { return func(o *Options) { o.CredsFile = path } }

func TestAuthentication(t *testing.T) {
	op := newOperator(t)
	stranger, err := nkeys.CreateAccount()
	require.NoError(t, err)
	garbage := filepath.Join(t.TempDir(), "garbage.creds")
	require.NoError(t, os.WriteFile(garbage, []byte("not credentials"), 0o600))
	withPassword := natstest.Option(func(o *server.Options) {
		o.Users = []*server.User{{Username: "bus", Password: "s3cret-pw"}}
	})
	tests := []struct {
		name   string
		server natstest.Option
		// userInfo goes in the URL.
		userInfo string
		client   func(*Options)
		wantErr  string
	}{
		{name: "user and password", server: withPassword, userInfo: "bus:s3cret-pw@"},
		{name: "a wrong password", server: withPassword, userInfo: "bus:wr0ng-pw@", wantErr: "Authorization Violation"},
		{name: "no password", server: withPassword, wantErr: "Authorization Violation"},
		{name: "a credentials file of the fleet's account", server: op.option, client: withCreds(creds(t, op.fleet))},
		{name: "a credentials file of an account the server does not know", server: op.option, client: withCreds(creds(t, stranger)),
			wantErr: "Authorization Violation"},
		{name: "a credentials file that holds none", server: op.option, client: withCreds(garbage), wantErr: "no nkey seed found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := natstest.Start(t, tt.server)
			url := "nats://" + tt.userInfo + srv.Addr().String()
			var options []func(*Options)
			if tt.client != nil {
				options = append(options, tt.client)
			}
			c := startClient(t, url, "bus-1", options...)
			if publishesOrFails(t, c, tt.wantErr) {
				return
			}
			assert.Contains(t, c.Stats().Error, tt.wantErr)
			assert.NotContains(t, c.Stats().Error, "pw", "the password stays out of the error")
			assert.False(t, c.Stats().Connected)
		})
	}
}

// publishesOrFails: with no error expected, c connects and publishes what
// an estimator learns, and it reports true; otherwise it waits for c to
// say why it is not connected and reports false.
func publishesOrFails(t *testing.T, c *Client, wantErr string) bool {
	t.Helper()
	if wantErr == "" {
		require.Eventually(t, connected(c), waitFor, tick, "%+v", c.Stats())
		learn(newEstimator(t, c), cellA, 400_000)
		require.Eventually(t, func() bool { return c.Stats().Published == 1 }, waitFor, tick)
		return true
	}
	require.Eventually(t, func() bool { return c.Stats().Error != "" }, waitFor, tick)
	return false
}
