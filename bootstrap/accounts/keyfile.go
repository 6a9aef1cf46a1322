package accounts

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// KeyFileName is the server's signing key in the data dir.
const KeyFileName = "accounts_ed25519.pem"

// LoadOrCreateKey reads the server's ed25519 signing key from dataDir, or
// creates it (mode 0600) if there is none, so that tokens stay valid across
// restarts. The file is PEM PKCS#8, readable with openssl.
func LoadOrCreateKey(dataDir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dataDir, KeyFileName)
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		return parseKey(path, data)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read key %s: %w", path, err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create key: %w", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("create key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("create key: %w", err)
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	// Write beside and rename, so a crash never leaves half a key; O_EXCL
	// on the final name keeps two starting servers from both writing.
	tmp, err := os.CreateTemp(dataDir, ".key-*")
	if err != nil {
		return nil, fmt.Errorf("create key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("create key: %w", err)
	}
	if _, err := tmp.Write(pemBytes); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("create key: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("create key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("create key: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadOrCreateKey(dataDir) // another process won the race
		}
		return nil, fmt.Errorf("create key: %w", err)
	}
	return priv, nil
}

func parseKey(path string, data []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("key %s: not a PEM PRIVATE KEY", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key %s: %T is not an ed25519 key", path, k)
	}
	if info, err := os.Stat(path); err == nil && info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("key %s: mode %v lets others read it; chmod 600", path, info.Mode().Perm())
	}
	return priv, nil
}
