package accounts

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
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeSelfSigned writes a certificate for 127.0.0.1 and its key.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "overworld test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// Serve speaks TLS when given a certificate, and returns nil after a
// graceful shutdown when its context ends.
func TestServeTLSAndShutdown(t *testing.T) {
	dir := t.TempDir()
	store, err := OpenStore(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	key, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, pool := writeSelfSigned(t, dir)
	srv, err := New(Config{Key: key, Hash: testHash, Logger: quietLogger(), TLSCertFile: certFile, TLSKeyFile: keyFile}, store)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	c, err := NewClient("https://"+ln.Addr().String(), WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := c.PublicKey(ctx)
	if err != nil {
		t.Fatalf("over TLS: %v", err)
	}
	if !pub.Equal(srv.PublicKey()) {
		t.Fatal("wrong key over TLS")
	}
	if resp, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP answered on a TLS listener")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after shutdown: %v", err)
	}
	if _, err := (&net.Dialer{Timeout: time.Second}).Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("listener still open after shutdown")
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	k1, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(dir, KeyFileName))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", info.Mode(), err)
	}
	k2, err := LoadOrCreateKey(dir)
	if err != nil || !k1.Equal(k2) {
		t.Fatalf("key changed across loads: %v", err)
	}
	os.Chmod(filepath.Join(dir, KeyFileName), 0o644)
	if _, err := LoadOrCreateKey(dir); err == nil {
		t.Fatal("world-readable key accepted")
	}
	os.WriteFile(filepath.Join(dir, KeyFileName), []byte("garbage"), 0o600)
	if _, err := LoadOrCreateKey(dir); err == nil {
		t.Fatal("garbage key accepted")
	}
}

// Migrations run once: a second open of the same database finds them
// applied and keeps the data.
func TestMigrationsIdempotent(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		s1 := open()
		ctx := context.Background()
		if err := s1.CreateAccount(ctx, Account{ID: "x1", Name: "quinn", PasswordHash: "h", Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
		s2 := open()
		if _, err := s2.AccountByName(ctx, "QUINN"); err != nil {
			t.Fatalf("after reopening: %v", err)
		}
		ms, _ := loadMigrations()
		var n int
		if err := s2.db.QueryRow("SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil || n != len(ms) {
			t.Fatalf("schema_migrations has %d rows (%v), want %d", n, err, len(ms))
		}
	})
}

func TestOpenStoreRejectsUnknownDatabases(t *testing.T) {
	for _, db := range []string{"mysql://x", "postgres-ish", "http://x"} {
		if _, err := OpenStore(context.Background(), db, t.TempDir()); err == nil {
			t.Errorf("%q accepted", db)
		}
	}
	if got := redactDSN("postgres://u:secret@h/db"); got != "postgres://u:xxxxx@h/db" {
		t.Errorf("redact: %q", got)
	}
}

func TestPasswordHashing(t *testing.T) {
	h, err := newHasher(testHash, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	enc, err := h.Hash(ctx, "hunter2hunter2")
	if err != nil {
		t.Fatal(err)
	}
	enc2, _ := h.Hash(ctx, "hunter2hunter2")
	if enc == enc2 {
		t.Fatal("two hashes of one password are equal: salt missing")
	}
	if ok, err := h.Check(ctx, enc, "hunter2hunter2"); !ok || err != nil {
		t.Fatalf("right password: %v %v", ok, err)
	}
	if ok, _ := h.Check(ctx, enc, "hunter3hunter3"); ok {
		t.Fatal("wrong password accepted")
	}
	for _, bad := range []string{"", "$argon2i$v=19$m=256,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "$argon2id$v=19$m=99999999,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA"} {
		if _, err := h.Check(ctx, bad, "x"); err == nil {
			t.Errorf("malformed hash %q accepted", bad)
		}
	}
}

// The SQLite file holds password hashes: only the server's user reads it.
func TestSQLiteFileIsPrivate(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	info, err := os.Stat(filepath.Join(dir, "accounts.db"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Fatalf("accounts.db mode %v, want 0600", perm)
	}
}
