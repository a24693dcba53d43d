package endpoint_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/providers/webhook"
)

// testCA issues certificates for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "outboxd test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a certificate and key in PEM for name.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// TestAnEndpointPresentsItsClientCertificate: a receiver that requires
// mutual TLS accepts an endpoint's deliveries once the endpoint has a
// client certificate its CA issued, and refuses them before; the key is
// stored sealed.
func TestAnEndpointPresentsItsClientCertificate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	ca := newTestCA(t)
	srvCert, srvKey := ca.issue(t, "receiver", x509.ExtKeyUsageServerAuth)
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	require.NoError(t, err)
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.TLS.PeerCertificates[0].Subject.CommonName)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool}
	srv.StartTLS()
	defer srv.Close()

	ep, _ := f.create(t, endpoint.Endpoint{URL: srv.URL + "/in", EventTypes: []string{"*"}})
	p, err := endpoint.New(endpoint.Config{DB: f.db.Pool, Schema: f.db.Schema, Key: f.key,
		Webhook: webhook.Config{AllowedNetworks: loopback, Timeout: 5 * time.Second, RootCAs: ca.pool}})
	require.NoError(t, err)
	_, err = p.Send(ctx, request(ep.ID))
	require.Error(t, err, "no client certificate: the receiver refuses the handshake")
	require.False(t, providers.IsThrottled(err))

	clientCert, clientKey := ca.issue(t, "outboxd partner-acme", x509.ExtKeyUsageClientAuth)
	require.NoError(t, f.reg.SetClientCertificate(ctx, f.db.Pool, ep.ID, clientCert, clientKey, admin))
	got, err := f.reg.Get(ctx, f.db.Pool, ep.ID)
	require.NoError(t, err)
	require.Equal(t, "CN=outboxd partner-acme", got.ClientCertificate.Subject)
	var stored string
	require.NoError(t, f.db.Pool.QueryRow(ctx, "SELECT encode(client_key_sealed, 'escape') FROM "+f.db.Schema+".outboxd_endpoints WHERE id = $1", ep.ID).Scan(&stored))
	require.NotContains(t, stored, "PRIVATE KEY", "the private key is sealed")

	_, err = p.Send(ctx, request(ep.ID))
	require.NoError(t, err)
	mu.Lock()
	require.Equal(t, []string{"outboxd partner-acme"}, seen)
	mu.Unlock()

	_, otherKey := ca.issue(t, "other", x509.ExtKeyUsageClientAuth)
	var verr *endpoint.ValidationError
	require.ErrorAs(t, f.reg.SetClientCertificate(ctx, f.db.Pool, ep.ID, clientCert, otherKey, admin), &verr, "a key that is not the certificate's")
	require.Equal(t, "client_certificate", verr.Field)
}
