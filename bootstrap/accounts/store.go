package accounts

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/overworld-p2p/overworld/bootstrap/leases"
)

// Store errors; the server maps them to HTTP answers.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	// ErrRefreshReused: a refresh token was presented a second time; its
	// session is revoked.
	ErrRefreshReused = errors.New("refresh token reused")
	// ErrTooManyPeers: the account already has as many peers with live
	// tokens as it may.
	ErrTooManyPeers = errors.New("too many peers")
)

// Account is a stored account.
type Account struct {
	ID           string
	Name         string
	PasswordHash string
	Disabled     bool
	Created      time.Time
}

// Session is one login: the refresh token (stored as a hash) and the peer
// ID the access tokens are issued to.
type Session struct {
	ID          string
	AccountID   string
	AccountName string // filled by ListSessions
	PeerID      string
	RefreshHash string
	Source      string // remote address of the login
	Created     time.Time
	Refreshed   time.Time
	Expires     time.Time
	Revoked     time.Time // zero while active
}

// Active reports whether the session can still refresh or act at now.
func (s Session) Active(now time.Time) bool {
	return s.Revoked.IsZero() && now.Before(s.Expires)
}

// Store keeps accounts, sessions, characters and leases. Every method is
// one transaction. The one implementation is SQL over database/sql, for
// SQLite and PostgreSQL, created by OpenStore.
type Store struct {
	db      *sql.DB
	dialect dialect
}

// dialect holds what differs between the two databases.
type dialect struct {
	name string
	// positional placeholders $1, $2 … instead of ?.
	dollarPlaceholders bool
	// forUpdate is appended to a SELECT that reads a row about to be
	// changed in the same transaction.
	forUpdate string
	// lockMigrations runs first in the migration transaction so that
	// concurrent servers migrate one at a time.
	lockMigrations string
}

var (
	sqliteDialect   = dialect{name: "sqlite"}
	postgresDialect = dialect{name: "postgres", dollarPlaceholders: true, forUpdate: " FOR UPDATE",
		lockMigrations: "SELECT pg_advisory_xact_lock(7463021)"}
)

// OpenStore opens the store named by db and applies pending migrations.
//
//   - "" or "sqlite": the SQLite file accounts.db in dataDir.
//   - "sqlite:PATH" or "file:PATH": that SQLite file.
//   - "postgres://…" or "postgresql://…": PostgreSQL through pgx.
func OpenStore(ctx context.Context, db, dataDir string) (*Store, error) {
	switch {
	case db == "" || db == "sqlite":
		if dataDir == "" {
			return nil, errors.New("open store: no data dir for the SQLite file")
		}
		return openSQLite(ctx, filepath.Join(dataDir, "accounts.db"))
	case strings.HasPrefix(db, "sqlite:"):
		return openSQLite(ctx, strings.TrimPrefix(db, "sqlite:"))
	case strings.HasPrefix(db, "file:"):
		return openSQLite(ctx, strings.TrimPrefix(db, "file:"))
	case strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://"):
		return openPostgres(ctx, db)
	}
	return nil, fmt.Errorf("open store: unknown database %q (want sqlite:PATH or postgres://…)", redactDSN(db))
}

// redactDSN hides a password in a database URL for messages and logs.
func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		if err != nil {
			return "(unparseable database URL)"
		}
		return dsn
	}
	return u.Redacted()
}

func openSQLite(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("open sqlite: empty path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	// The file holds password hashes: create it private. SQLite gives its
	// -wal and -shm files the database file's mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	f.Close()
	// WAL lets readers run beside the writer; IMMEDIATE transactions take
	// the write lock at BEGIN, so read-modify-write transactions (leases,
	// saves) serialize instead of failing when they upgrade.
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	// One connection: SQLite has one writer anyway, and writers waiting
	// in its busy handler poll with growing sleeps, so under many
	// concurrent lease and save transactions on a loaded machine some
	// waited seconds and their callers timed out (the demo's "lease
	// service unreachable"). Go's pool hands the connection over in
	// order, at once.
	db.SetMaxOpenConns(1)
	s := &Store{db: db, dialect: sqliteDialect}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return s, nil
}

func openPostgres(ctx context.Context, dsn string) (*Store, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", redactDSN(dsn), err)
	}
	db.SetMaxOpenConns(16)
	s := &Store{db: db, dialect: postgresDialect}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres %s: %w", redactDSN(dsn), err)
	}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres %s: %w", redactDSN(dsn), err)
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Dialect names the database: "sqlite" or "postgres".
func (s *Store) Dialect() string { return s.dialect.name }

// Ping checks that the database answers (for /healthz).
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %q: name must start with a positive number and _", e.Name())
		}
		body, err := fs.ReadFile(migrationFiles, "migrations/"+e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: e.Name(), sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", out[i-1].name, out[i].name, out[i].version)
		}
	}
	return out, nil
}

// statements splits a migration into statements: each ends with ';' at the
// end of a line. Comment lines are dropped.
func statements(script string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.SplitSeq(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if rest := strings.TrimSpace(cur.String()); rest != "" {
		out = append(out, rest)
	}
	return out
}

// migrate applies every migration not yet recorded, each in its own
// transaction together with its record.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_us BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	for _, m := range ms {
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			if s.dialect.lockMigrations != "" {
				if _, err := tx.ExecContext(ctx, s.dialect.lockMigrations); err != nil {
					return err
				}
			}
			var n int
			if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`), m.version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			for _, stmt := range statements(m.sql) {
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("%.60q: %w", stmt, err)
				}
			}
			_, err := tx.ExecContext(ctx, s.q(`INSERT INTO schema_migrations (version, name, applied_us) VALUES (?, ?, ?)`),
				m.version, m.name, time.Now().UnixMicro())
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate %s: %w", m.name, err)
		}
	}
	return nil
}

// q rewrites ? placeholders for the dialect. Queries here never contain a
// literal '?'.
func (s *Store) q(query string) string {
	if !s.dialect.dollarPlaceholders {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// inTx runs f in a transaction and commits if f returns nil.
func (s *Store) inTx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// isUniqueViolation reports whether err is a unique or primary key
// constraint failure in either database.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "23505"
	}
	var liteErr *sqlite.Error
	if errors.As(err, &liteErr) {
		return liteErr.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || liteErr.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}

func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

// CreateAccount inserts a; a name whose key is taken fails with
// ErrConflict. The unique index decides races between concurrent
// registrations.
func (s *Store) CreateAccount(ctx context.Context, a Account) error {
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO accounts (id, name, name_key, password_hash, disabled, created_us, updated_us)
		VALUES (?, ?, ?, ?, 0, ?, ?)`), a.ID, a.Name, nameKey(a.Name), a.PasswordHash, micros(a.Created), micros(a.Created))
	if isUniqueViolation(err) {
		return fmt.Errorf("create account %q: %w", a.Name, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create account %q: %w", a.Name, err)
	}
	return nil
}

func scanAccount(row interface{ Scan(...any) error }) (Account, error) {
	var a Account
	var disabled, created int64
	if err := row.Scan(&a.ID, &a.Name, &a.PasswordHash, &disabled, &created); err != nil {
		return Account{}, err
	}
	a.Disabled = disabled != 0
	a.Created = fromMicros(created)
	return a, nil
}

// AccountByName looks an account up by name, case-insensitively.
func (s *Store) AccountByName(ctx context.Context, name string) (Account, error) {
	a, err := scanAccount(s.db.QueryRowContext(ctx, s.q(`SELECT id, name, password_hash, disabled, created_us FROM accounts WHERE name_key = ?`), nameKey(name)))
	if errors.Is(err, sql.ErrNoRows) {
		return Account{}, fmt.Errorf("account %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Account{}, fmt.Errorf("account %q: %w", name, err)
	}
	return a, nil
}

// AccountByID looks an account up by ID.
func (s *Store) AccountByID(ctx context.Context, id string) (Account, error) {
	a, err := scanAccount(s.db.QueryRowContext(ctx, s.q(`SELECT id, name, password_hash, disabled, created_us FROM accounts WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Account{}, fmt.Errorf("account %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Account{}, fmt.Errorf("account %s: %w", id, err)
	}
	return a, nil
}

// SetPassword replaces an account's password hash and revokes every
// session except keepSession (which may be "").
func (s *Store) SetPassword(ctx context.Context, accountID, hash, keepSession string, now time.Time) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`UPDATE accounts SET password_hash = ?, updated_us = ? WHERE id = ?`), hash, micros(now), accountID)
		if err != nil {
			return fmt.Errorf("set password: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("set password %s: %w", accountID, ErrNotFound)
		}
		_, err = tx.ExecContext(ctx, s.q(`UPDATE sessions SET revoked_us = ? WHERE account_id = ? AND id <> ? AND revoked_us = 0`), micros(now), accountID, keepSession)
		if err != nil {
			return fmt.Errorf("set password: revoke sessions: %w", err)
		}
		return nil
	})
}

// SetDisabled disables or enables the named account. Disabling revokes all
// its sessions.
func (s *Store) SetDisabled(ctx context.Context, name string, disabled bool, now time.Time) (Account, error) {
	var a Account
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		a, err = scanAccount(tx.QueryRowContext(ctx, s.q(`SELECT id, name, password_hash, disabled, created_us FROM accounts WHERE name_key = ?`+s.dialect.forUpdate), nameKey(name)))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("account %q: %w", name, ErrNotFound)
		}
		if err != nil {
			return err
		}
		flag := 0
		if disabled {
			flag = 1
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE accounts SET disabled = ?, updated_us = ? WHERE id = ?`), flag, micros(now), a.ID); err != nil {
			return err
		}
		if disabled {
			if _, err := tx.ExecContext(ctx, s.q(`UPDATE sessions SET revoked_us = ? WHERE account_id = ? AND revoked_us = 0`), micros(now), a.ID); err != nil {
				return err
			}
		}
		a.Disabled = disabled
		return nil
	})
	if err != nil {
		return Account{}, fmt.Errorf("set disabled %q: %w", name, err)
	}
	return a, nil
}

// CreateSession stores a new session.
func (s *Store) CreateSession(ctx context.Context, ss Session) error {
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO sessions (id, account_id, peer_id, refresh_hash, source, created_us, refreshed_us, expires_us, revoked_us)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)`), ss.ID, ss.AccountID, ss.PeerID, ss.RefreshHash, ss.Source, micros(ss.Created), micros(ss.Created), micros(ss.Expires))
	if err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	return nil
}

const sessionColumns = `s.id, s.account_id, a.name, s.peer_id, s.refresh_hash, s.source, s.created_us, s.refreshed_us, s.expires_us, s.revoked_us`

func scanSession(row interface{ Scan(...any) error }) (Session, error) {
	var ss Session
	var created, refreshed, expires, revoked int64
	if err := row.Scan(&ss.ID, &ss.AccountID, &ss.AccountName, &ss.PeerID, &ss.RefreshHash, &ss.Source, &created, &refreshed, &expires, &revoked); err != nil {
		return Session{}, err
	}
	ss.Created, ss.Refreshed, ss.Expires, ss.Revoked = fromMicros(created), fromMicros(refreshed), fromMicros(expires), fromMicros(revoked)
	return ss, nil
}

// SessionByID returns a session.
func (s *Store) SessionByID(ctx context.Context, id string) (Session, error) {
	ss, err := scanSession(s.db.QueryRowContext(ctx, s.q(`SELECT `+sessionColumns+` FROM sessions s JOIN accounts a ON a.id = s.account_id WHERE s.id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("session %s: %w", id, err)
	}
	return ss, nil
}

// RotateRefresh swaps the refresh token of the session holding oldHash for
// newHash, if that session is active at now, and returns the session as it
// was. A refresh token works once: the spent one is remembered while its
// session lasts, and a second use of it revokes the session (someone
// copied it; whichever of thief and owner comes second, both lose the
// session) and fails with ErrRefreshReused. A token never issued, or of an
// ended session, fails with ErrNotFound.
func (s *Store) RotateRefresh(ctx context.Context, oldHash, newHash string, now, expires time.Time) (Session, error) {
	var ss Session
	reused := false
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		ss, err = scanSession(tx.QueryRowContext(ctx, s.q(`SELECT `+sessionColumns+` FROM sessions s JOIN accounts a ON a.id = s.account_id WHERE s.refresh_hash = ?`+s.dialect.forUpdate), oldHash))
		if errors.Is(err, sql.ErrNoRows) {
			var sessionID string
			err := tx.QueryRowContext(ctx, s.q(`SELECT session_id FROM spent_refresh_tokens WHERE refresh_hash = ?`), oldHash).Scan(&sessionID)
			if errors.Is(err, sql.ErrNoRows) {
				return ErrNotFound
			}
			if err != nil {
				return err
			}
			ss.ID = sessionID
			if _, err := tx.ExecContext(ctx, s.q(`UPDATE sessions SET revoked_us = ? WHERE id = ? AND revoked_us = 0`), micros(now), sessionID); err != nil {
				return err
			}
			reused = true
			return nil
		}
		if err != nil {
			return err
		}
		if !ss.Active(now) {
			return ErrNotFound
		}
		_, err = tx.ExecContext(ctx, s.q(`UPDATE sessions SET refresh_hash = ?, refreshed_us = ?, expires_us = ? WHERE id = ? AND refresh_hash = ?`),
			newHash, micros(now), micros(expires), ss.ID, oldHash)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO spent_refresh_tokens (refresh_hash, session_id, spent_us) VALUES (?, ?, ?)`), oldHash, ss.ID, micros(now))
		return err
	})
	if err != nil {
		return Session{}, fmt.Errorf("rotate refresh token: %w", err)
	}
	if reused {
		// Committed: the revocation stands although the call fails.
		return ss, fmt.Errorf("rotate refresh token of session %s: %w", ss.ID, ErrRefreshReused)
	}
	return ss, nil
}

// RevokeSession ends a session at now.
func (s *Store) RevokeSession(ctx context.Context, id string, now time.Time) error {
	_, err := s.db.ExecContext(ctx, s.q(`UPDATE sessions SET revoked_us = ? WHERE id = ? AND revoked_us = 0`), micros(now), id)
	if err != nil {
		return fmt.Errorf("revoke session %s: %w", id, err)
	}
	return nil
}

// ListSessions lists the sessions active at now, of the named account or
// of all accounts if name is "", newest first, at most limit.
func (s *Store) ListSessions(ctx context.Context, name string, now time.Time, limit int) ([]Session, error) {
	query := `SELECT ` + sessionColumns + ` FROM sessions s JOIN accounts a ON a.id = s.account_id
		WHERE s.revoked_us = 0 AND s.expires_us > ?`
	args := []any{micros(now)}
	if name != "" {
		query += ` AND a.name_key = ?`
		args = append(args, nameKey(name))
	}
	query += ` ORDER BY s.created_us DESC, s.id LIMIT ?`
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		ss, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		out = append(out, ss)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return out, nil
}

// LoadCharacter returns the account's saved character, or ErrNotFound if
// it never saved one.
func (s *Store) LoadCharacter(ctx context.Context, accountID string) (Character, error) {
	var c Character
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var saved int64
		err := tx.QueryRowContext(ctx, s.q(`SELECT region, x, y, health, hunger, score, experience, version, saved_us FROM characters WHERE account_id = ?`), accountID).
			Scan(&c.Region, &c.X, &c.Y, &c.Health, &c.Hunger, &c.Score, &c.Experience, &c.Version, &saved)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		c.SavedAt = fromMicros(saved)
		rows, err := tx.QueryContext(ctx, s.q(`SELECT kind, count FROM inventory WHERE account_id = ? ORDER BY kind`), accountID)
		if err != nil {
			return err
		}
		defer rows.Close()
		c.Inventory = []Item{}
		for rows.Next() {
			var it Item
			if err := rows.Scan(&it.Kind, &it.Count); err != nil {
				return err
			}
			c.Inventory = append(c.Inventory, it)
		}
		return rows.Err()
	})
	if err != nil {
		return Character{}, fmt.Errorf("load character of %s: %w", accountID, err)
	}
	return c, nil
}

// SaveCharacter stores c for the account in one transaction and returns
// the new version. The stored version must equal baseVersion (ErrConflict
// otherwise; 0 means "no character yet"), so two clients of one account
// cannot silently overwrite each other and nobody overwrites
// unconditionally. check, if not nil, sees the stored character (Version
// 0 if none) inside the transaction and may refuse the save. A failure
// anywhere leaves the previous character as it was.
func (s *Store) SaveCharacter(ctx context.Context, accountID string, c Character, baseVersion int64, now time.Time, check func(prev Character) error) (int64, error) {
	var version int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var prev Character
		var saved int64
		err := tx.QueryRowContext(ctx, s.q(`SELECT region, x, y, health, hunger, score, experience, version, saved_us FROM characters WHERE account_id = ?`+s.dialect.forUpdate), accountID).
			Scan(&prev.Region, &prev.X, &prev.Y, &prev.Health, &prev.Hunger, &prev.Score, &prev.Experience, &prev.Version, &saved)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			prev = Character{}
		case err != nil:
			return err
		}
		prev.SavedAt = fromMicros(saved)
		current := prev.Version
		if baseVersion != current {
			return fmt.Errorf("%w: saved version is %d, client based its save on %d", ErrConflict, current, baseVersion)
		}
		if check != nil {
			if err := check(prev); err != nil {
				return err
			}
		}
		version = current + 1
		if current == 0 {
			_, err = tx.ExecContext(ctx, s.q(`INSERT INTO characters (account_id, region, x, y, health, hunger, score, experience, version, saved_us)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`), accountID, c.Region, c.X, c.Y, c.Health, c.Hunger, c.Score, c.Experience, version, micros(now))
		} else {
			_, err = tx.ExecContext(ctx, s.q(`UPDATE characters SET region = ?, x = ?, y = ?, health = ?, hunger = ?, score = ?, experience = ?, version = ?, saved_us = ?
				WHERE account_id = ?`), c.Region, c.X, c.Y, c.Health, c.Hunger, c.Score, c.Experience, version, micros(now), accountID)
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM inventory WHERE account_id = ?`), accountID); err != nil {
			return err
		}
		for _, it := range c.Inventory {
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO inventory (account_id, kind, count) VALUES (?, ?, ?)`), accountID, it.Kind, it.Count); err != nil {
				return fmt.Errorf("item %q: %w", it.Kind, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("save character of %s: %w", accountID, err)
	}
	return version, nil
}

// UpdateLease applies f to the region's lease record in one transaction
// that locks the record, and stores the result if f changed it. The
// record's LeaseID only ever grows, so lease IDs are fencing tokens across
// restarts and across servers sharing one database.
func (s *Store) UpdateLease(ctx context.Context, region string, f func(leases.Record) (leases.Record, bool, error)) (leases.Record, error) {
	var out leases.Record
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO leases (region, holder, lease_id, granted_us, expires_us) VALUES (?, '', 0, 0, 0)
			ON CONFLICT (region) DO NOTHING`), region); err != nil {
			return err
		}
		var r leases.Record
		var id, granted, expires int64
		err := tx.QueryRowContext(ctx, s.q(`SELECT holder, lease_id, granted_us, expires_us FROM leases WHERE region = ?`+s.dialect.forUpdate), region).
			Scan(&r.Holder, &id, &granted, &expires)
		if err != nil {
			return err
		}
		r.Region, r.LeaseID, r.Granted, r.Expires = region, uint64(id), fromMicros(granted), fromMicros(expires)
		next, changed, err := f(r)
		if err != nil {
			out = r
			return err
		}
		if next.LeaseID < r.LeaseID {
			return fmt.Errorf("lease id of %s would go back from %d to %d", region, r.LeaseID, next.LeaseID)
		}
		out = next
		if !changed {
			return nil
		}
		_, err = tx.ExecContext(ctx, s.q(`UPDATE leases SET holder = ?, lease_id = ?, granted_us = ?, expires_us = ? WHERE region = ?`),
			next.Holder, int64(next.LeaseID), micros(next.Granted), micros(next.Expires), region)
		return err
	})
	if err != nil {
		return out, fmt.Errorf("lease %s: %w", region, err)
	}
	return out, nil
}

// ListLeases returns every region's lease record, by region.
func (s *Store) ListLeases(ctx context.Context) ([]leases.Record, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT region, holder, lease_id, granted_us, expires_us FROM leases ORDER BY region`)
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	defer rows.Close()
	var out []leases.Record
	for rows.Next() {
		var r leases.Record
		var id, granted, expires int64
		if err := rows.Scan(&r.Region, &r.Holder, &id, &granted, &expires); err != nil {
			return nil, fmt.Errorf("list leases: %w", err)
		}
		r.LeaseID, r.Granted, r.Expires = uint64(id), fromMicros(granted), fromMicros(expires)
		out = append(out, r)
	}
	return out, rows.Err()
}
