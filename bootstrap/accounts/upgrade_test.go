package accounts

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"
)

// TestUpgradeKeepsCharacters opens a SQLite store written by the first
// schema (before characters had hunger) and checks that the pending
// migrations apply and the saved character loads, fed.
func TestUpgradeKeepsCharacters(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "accounts.db")
	old, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := loadMigrations()
	if err != nil || len(ms) < 2 || ms[0].version != 1 {
		t.Fatalf("migrations %v %v", ms, err)
	}
	for _, stmt := range append([]string{`CREATE TABLE schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_us BIGINT NOT NULL)`}, statements(ms[0].sql)...) {
		if _, err := old.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%.60q: %v", stmt, err)
		}
	}
	for _, stmt := range []string{
		`INSERT INTO schema_migrations (version, name, applied_us) VALUES (1, '` + ms[0].name + `', 1)`,
		`INSERT INTO accounts (id, name, name_key, password_hash, created_us, updated_us) VALUES ('a1', 'Rosa', 'rosa', 'h', 1, 1)`,
		`INSERT INTO characters (account_id, region, x, y, health, score, experience, version, saved_us) VALUES ('a1', '2,3', 700, 900, 55, 12, 4, 3, 1)`,
	} {
		if _, err := old.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%.60q: %v", stmt, err)
		}
	}
	old.Close()

	s, err := OpenStore(ctx, "sqlite:"+path, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := s.LoadCharacter(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if c.Region != "2,3" || c.X != 700 || c.Y != 900 || c.Health != 55 || c.Hunger != 0 || c.Score != 12 || c.Experience != 4 || c.Version != 3 {
		t.Fatalf("upgraded character %+v", c)
	}
	c.Hunger = 70
	if v, err := s.SaveCharacter(ctx, "a1", c, c.Version, time.Now(), nil); err != nil || v != 4 {
		t.Fatalf("save after upgrade: %d %v", v, err)
	}
	if c, err = s.LoadCharacter(ctx, "a1"); err != nil || c.Hunger != 70 {
		t.Fatalf("hunger after save: %+v %v", c, err)
	}
}
