package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
)

// IdentityFileName is the name of the identity key inside a data dir.
const IdentityFileName = "identity.key"

// maxKeyFileSize bounds what LoadOrCreateIdentity reads: a marshalled
// Ed25519 key is under 100 bytes, so anything near this is not a key.
const maxKeyFileSize = 4096

// LoadOrCreateIdentity returns the private key stored at path, creating an
// Ed25519 key there (mode 0600, parent dirs 0700) when the file does not
// exist. A key file readable by others is refused: it is the peer's identity.
func LoadOrCreateIdentity(path string) (crypto.PrivKey, error) {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return createIdentity(path)
	case err != nil:
		return nil, fmt.Errorf("identity key %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("identity key %s: not a regular file (%s)", path, info.Mode().Type())
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("identity key %s: permissions %#o are too open; want 0600 (run: chmod 600 %s)", path, perm, path)
	}
	if info.Size() > maxKeyFileSize {
		return nil, fmt.Errorf("identity key %s: %d bytes is too large for a key", path, info.Size())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity key %s: %w", path, err)
	}
	key, err := crypto.UnmarshalPrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("identity key %s: not a libp2p private key: %w", path, err)
	}
	return key, nil
}

func createIdentity(path string) (crypto.PrivKey, error) {
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		return nil, fmt.Errorf("generate identity key: %w", err)
	}
	raw, err := crypto.MarshalPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal identity key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("identity key dir: %w", err)
	}
	// Write to a temporary name and rename, so a crash never leaves a
	// half-written identity behind.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".identity-*")
	if err != nil {
		return nil, fmt.Errorf("create identity key %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("create identity key %s: %w", path, err)
	}
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write identity key %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write identity key %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("write identity key %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return nil, fmt.Errorf("install identity key %s: %w", path, err)
	}
	return key, nil
}
