package master

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // the "sqlite" database/sql driver
)

// Store errors; the server maps them to HTTP answers.
var (
	errNoGame     = errors.New("no such game")
	errOwner      = errors.New("game registered by another operator")
	errInstance   = errors.New("game registered by another instance")
	errStoreFull  = errors.New("registry full")
	errBadStoreDB = errors.New("unknown database")
)

// Store is the registry's persistent state: games and their mirrors, the
// owner and keep-alive bookkeeping of each. It runs on SQLite (embedded,
// modernc.org/sqlite) or PostgreSQL (pgx) with the same migrations and the
// same queries: both databases read $1, $2 … placeholders, ON CONFLICT and
// RETURNING. Every method is one transaction.
type Store struct {
	db      *sql.DB
	dialect string // "sqlite" or "postgres"
	// forUpdate locks the rows a read-modify-write transaction reads
	// (PostgreSQL); SQLite's IMMEDIATE transactions lock the database.
	forUpdate string
}

// OpenStore opens the store named by db and applies pending migrations:
//
//   - "" or "sqlite": the file master.db in dataDir;
//   - "sqlite:PATH" or "file:PATH": that SQLite file;
//   - "postgres://…" or "postgresql://…": PostgreSQL.
func OpenStore(ctx context.Context, db, dataDir string) (*Store, error) {
	var s *Store
	var err error
	switch {
	case db == "" || db == "sqlite":
		if dataDir == "" {
			return nil, errors.New("open master store: no data dir for the SQLite file")
		}
		s, err = openSQLite(filepath.Join(dataDir, "master.db"))
	case strings.HasPrefix(db, "sqlite:"), strings.HasPrefix(db, "file:"):
		_, p, _ := strings.Cut(db, ":")
		s, err = openSQLite(p)
	case strings.HasPrefix(db, "postgres://"), strings.HasPrefix(db, "postgresql://"):
		s, err = openPostgres(ctx, db)
	default:
		return nil, fmt.Errorf("open master store %q: %w (want sqlite:PATH or postgres://…)", hideSecret(db), errBadStoreDB)
	}
	if err != nil {
		return nil, fmt.Errorf("open master store %s: %w", hideSecret(db), err)
	}
	if err := s.migrate(ctx); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("open master store %s: %w", hideSecret(db), err)
	}
	return s, nil
}

// hideSecret drops the password of a database URL for messages.
func hideSecret(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(database URL)"
	}
	return u.Redacted()
}

func openSQLite(file string) (*Store, error) {
	if file == "" {
		return nil, errors.New("empty SQLite path")
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return nil, err
	}
	// busy_timeout waits out a concurrent writer instead of failing; WAL
	// lets queries read while a keep-alive round writes; foreign keys
	// cascade mirror rows; IMMEDIATE takes the write lock at BEGIN so
	// read-modify-write transactions serialize.
	params := url.Values{"_txlock": {"immediate"}, "_pragma": {
		"busy_timeout(10000)", "journal_mode(WAL)", "foreign_keys(1)", "synchronous(NORMAL)",
	}}
	db, err := sql.Open("sqlite", "file:"+file+"?"+params.Encode())
	if err != nil {
		return nil, err
	}
	return &Store{db: db, dialect: "sqlite"}, nil
}

func openPostgres(ctx context.Context, dsn string) (*Store, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(16)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return &Store{db: db, dialect: "postgres", forUpdate: " FOR UPDATE"}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Dialect is "sqlite" or "postgres".
func (s *Store) Dialect() string { return s.dialect }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

//go:embed migrations/*.sql
var migrationsFS embed.FS

// migrationLock serializes masters migrating one PostgreSQL database.
const migrationLock = 7463022

// migrate applies, in order, each migrations/NNNN_name.sql not yet listed
// in master_migrations, each in one transaction with its record.
func (s *Store) migrate(ctx context.Context) error {
	files, err := fs.Glob(migrationsFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	slices.Sort(files)
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS master_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_us BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("migrations table: %w", err)
	}
	seen := map[int]string{}
	for _, f := range files {
		name := path.Base(f)
		num, _, _ := strings.Cut(name, "_")
		version, err := strconv.Atoi(num)
		if err != nil || version < 1 {
			return fmt.Errorf("migration %s: name must start with a positive number and '_'", name)
		}
		if other, dup := seen[version]; dup {
			return fmt.Errorf("migrations %s and %s share version %d", other, name, version)
		}
		seen[version] = name
		script, err := migrationsFS.ReadFile(f)
		if err != nil {
			return err
		}
		if err := s.applyMigration(ctx, version, name, string(script)); err != nil {
			return fmt.Errorf("migration %s: %w", name, err)
		}
	}
	return nil
}

func (s *Store) applyMigration(ctx context.Context, version int, name, script string) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		if s.dialect == "postgres" {
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
				return err
			}
		}
		var done int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM master_migrations WHERE version = $1`, version).Scan(&done); err != nil {
			return err
		}
		if done > 0 {
			return nil
		}
		for _, stmt := range splitSQL(script) {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("%.50q: %w", stmt, err)
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO master_migrations (version, name, applied_us) VALUES ($1, $2, $3)`,
			version, name, time.Now().UnixMicro())
		return err
	})
}

// splitSQL cuts a script into statements at semicolons that end a line,
// leaving out "--" comment lines.
func splitSQL(script string) []string {
	var stmts []string
	var b strings.Builder
	for line := range strings.Lines(script) {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		b.WriteString(line)
		if strings.HasSuffix(t, ";") {
			stmts = append(stmts, strings.TrimSpace(b.String()))
			b.Reset()
		}
	}
	if rest := strings.TrimSpace(b.String()); rest != "" {
		stmts = append(stmts, rest)
	}
	return stmts
}

// tx runs f in a transaction, committed if f returns nil.
func (s *Store) tx(ctx context.Context, f func(*sql.Tx) error) error {
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

func usOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func timeOf(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

const gameColumns = `id, name, world, mode, players, capacity, version, status_url, missed, registered_us, updated_us, heard_us`

func scanGame(row interface{ Scan(...any) error }) (Game, error) {
	var g Game
	var version, registered, updated, heard int64
	var statusURL string
	if err := row.Scan(&g.ID, &g.Name, &g.World, &g.Mode, &g.Players, &g.Capacity, &version, &statusURL, &g.Missed, &registered, &updated, &heard); err != nil {
		return Game{}, err
	}
	g.Version = uint64(version)
	g.Free = g.GameInfo.Free()
	g.KeepAlive = KeepAlivePush
	if statusURL != "" {
		g.KeepAlive = KeepAlivePoll
	}
	g.RegisteredAt, g.UpdatedAt, g.HeardAt = timeOf(registered), timeOf(updated), timeOf(heard)
	g.Mirrors = []Mirror{}
	return g, nil
}

// fillMirrors loads the mirrors of games, in mirror ID order.
func fillMirrors(ctx context.Context, q querier, games []Game) error {
	if len(games) == 0 {
		return nil
	}
	byID := make(map[string]*Game, len(games))
	marks := make([]string, len(games))
	args := make([]any, len(games))
	for i := range games {
		byID[games[i].ID] = &games[i]
		marks[i] = "$" + strconv.Itoa(i+1)
		args[i] = games[i].ID
	}
	rows, err := q.QueryContext(ctx, `SELECT game_id, mirror_id, probe_addr, client_addr FROM master_mirrors
		WHERE game_id IN (`+strings.Join(marks, ", ")+`) ORDER BY game_id, mirror_id`, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var gameID string
		var id int64
		var m Mirror
		if err := rows.Scan(&gameID, &id, &m.ProbeAddr, &m.ClientAddr); err != nil {
			return err
		}
		m.ID = uint32(id)
		if g := byID[gameID]; g != nil {
			g.Mirrors = append(g.Mirrors, m)
		}
	}
	return rows.Err()
}

func writeMirrors(ctx context.Context, tx *sql.Tx, id string, ms []Mirror) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM master_mirrors WHERE game_id = $1`, id); err != nil {
		return err
	}
	for _, m := range ms {
		if _, err := tx.ExecContext(ctx, `INSERT INTO master_mirrors (game_id, mirror_id, probe_addr, client_addr) VALUES ($1, $2, $3, $4)`,
			id, int64(m.ID), m.ProbeAddr, m.ClientAddr); err != nil {
			return fmt.Errorf("mirror %d: %w", m.ID, err)
		}
	}
	return nil
}

// sameInfo reports whether two normalized infos are equal.
func sameInfo(a, b GameInfo) bool {
	return a.ID == b.ID && a.Name == b.Name && a.World == b.World && a.Mode == b.Mode &&
		a.Players == b.Players && a.Capacity == b.Capacity && slices.Equal(a.Mirrors, b.Mirrors)
}

// Register stores a validated registration for owner: a new game, or a
// replacement of the owner's game of that ID, which counts as word from
// the game for this keep-alive interval. A game of another owner is
// refused (errOwner); a new game beyond maxGames is refused
// (errStoreFull; concurrent registrations on PostgreSQL may overshoot by
// the number in flight).
func (s *Store) Register(ctx context.Context, owner string, reg Registration, now time.Time, maxGames int) (created bool, err error) {
	// The second try finds the row a concurrent first registration of
	// the same ID inserted, and replaces it.
	for range 2 {
		created, err = s.register(ctx, owner, reg, now, maxGames)
		if !errors.Is(err, errRace) {
			break
		}
	}
	return created, err
}

// errRace: another transaction inserted the same new game first.
var errRace = errors.New("game registered concurrently")

func (s *Store) register(ctx context.Context, owner string, reg Registration, now time.Time, maxGames int) (created bool, err error) {
	g := reg.Game.normalized()
	err = s.tx(ctx, func(tx *sql.Tx) error {
		var storedOwner string
		err := tx.QueryRowContext(ctx, `SELECT owner FROM master_games WHERE id = $1`+s.forUpdate, g.ID).Scan(&storedOwner)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM master_games`).Scan(&n); err != nil {
				return err
			}
			if n >= maxGames {
				return errStoreFull
			}
			res, err := tx.ExecContext(ctx, `INSERT INTO master_games (id, owner, instance, name, world, mode, players, capacity, version,
				status_url, status_key, heard, missed, registered_us, updated_us, heard_us)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 1, 0, $12, $12, $12) ON CONFLICT (id) DO NOTHING`,
				g.ID, owner, reg.Instance, g.Name, g.World, g.Mode, g.Players, g.Capacity, int64(reg.Version),
				reg.StatusURL, reg.StatusKey, usOf(now))
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				return errRace
			}
			created = true
			return writeMirrors(ctx, tx, g.ID, g.Mirrors)
		case err != nil:
			return err
		case storedOwner != owner:
			return errOwner
		}
		old, err := loadGame(ctx, tx, g.ID)
		if err != nil {
			return err
		}
		updated := usOf(old.UpdatedAt)
		if !sameInfo(old.GameInfo, g) {
			updated = usOf(now)
			if !slices.Equal(old.Mirrors, g.Mirrors) {
				if err := writeMirrors(ctx, tx, g.ID, g.Mirrors); err != nil {
					return err
				}
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE master_games SET instance = $2, name = $3, world = $4, mode = $5, players = $6, capacity = $7,
			version = $8, status_url = $9, status_key = $10, heard = 1, missed = 0, updated_us = $11, heard_us = $12 WHERE id = $1`,
			g.ID, reg.Instance, g.Name, g.World, g.Mode, g.Players, g.Capacity, int64(reg.Version), reg.StatusURL, reg.StatusKey, updated, usOf(now))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("register game %s: %w", g.ID, err)
	}
	return created, nil
}

func loadGame(ctx context.Context, q querier, id string) (Game, error) {
	g, err := scanGame(q.QueryRowContext(ctx, `SELECT `+gameColumns+` FROM master_games WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Game{}, errNoGame
	}
	if err != nil {
		return Game{}, err
	}
	games := []Game{g}
	if err := fillMirrors(ctx, q, games); err != nil {
		return Game{}, err
	}
	return games[0], nil
}

// Game returns one game with its mirrors.
func (s *Store) Game(ctx context.Context, id string) (Game, error) {
	g, err := loadGame(ctx, s.db, id)
	if err != nil {
		return Game{}, fmt.Errorf("game %s: %w", id, err)
	}
	return g, nil
}

// Deregister removes owner's game id. A non-empty instance must be the one
// that registered it last (errInstance otherwise), so an authority that
// handed the game on cannot remove its successor's registration.
func (s *Store) Deregister(ctx context.Context, owner, id, instance string) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var storedOwner, storedInstance string
		err := tx.QueryRowContext(ctx, `SELECT owner, instance FROM master_games WHERE id = $1`+s.forUpdate, id).Scan(&storedOwner, &storedInstance)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return errNoGame
		case err != nil:
			return err
		case storedOwner != owner:
			return errOwner
		case instance != "" && storedInstance != instance:
			return errInstance
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM master_games WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("deregister game %s: %w", id, err)
	}
	return nil
}

// List returns one page of the games f selects, by ID, and the After of
// the next page ("" on the last).
func (s *Store) List(ctx context.Context, f Filter) ([]Game, string, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.World != "" {
		where = append(where, "world = "+arg(f.World))
	}
	if f.Mode != "" {
		where = append(where, "mode = "+arg(f.Mode))
	}
	if f.MinFree > 0 {
		where = append(where, "capacity - players >= "+arg(f.MinFree))
	}
	if f.After != "" {
		where = append(where, "id > "+arg(f.After))
	}
	limit := f.Limit
	if limit <= 0 || limit > maxPageLimit {
		limit = defaultLimit
	}
	query := `SELECT ` + gameColumns + ` FROM master_games`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY id LIMIT ` + arg(limit+1)
	var games []Game
	err := func() error {
		rows, err := s.db.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			g, err := scanGame(rows)
			if err != nil {
				return err
			}
			games = append(games, g)
		}
		return rows.Err()
	}()
	if err != nil {
		return nil, "", fmt.Errorf("list games: %w", err)
	}
	next := ""
	if len(games) > limit {
		games = games[:limit]
		next = games[limit-1].ID
	}
	if err := fillMirrors(ctx, s.db, games); err != nil {
		return nil, "", fmt.Errorf("list games: mirrors: %w", err)
	}
	if games == nil {
		games = []Game{}
	}
	return games, next, nil
}

// pollTarget is a game the master polls.
type pollTarget struct {
	id, url, key string
	version      uint64
}

// pollTargets lists the games that gave a status URL, by ID.
func (s *Store) pollTargets(ctx context.Context) ([]pollTarget, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, status_url, status_key, version FROM master_games WHERE status_url <> '' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("poll targets: %w", err)
	}
	defer rows.Close()
	var out []pollTarget
	for rows.Next() {
		var t pollTarget
		var v int64
		if err := rows.Scan(&t.id, &t.url, &t.key, &v); err != nil {
			return nil, fmt.Errorf("poll targets: %w", err)
		}
		t.version = uint64(v)
		out = append(out, t)
	}
	return out, rows.Err()
}

// applyStatus records a validated answer to a poll of t: the game was
// heard, and its info replaced if the answer carries one. A game removed
// or re-registered with another status URL meanwhile is left alone.
// changed reports whether the stored info changed.
func (s *Store) applyStatus(ctx context.Context, t pollTarget, a StatusAnswer, now time.Time) (changed bool, err error) {
	err = s.tx(ctx, func(tx *sql.Tx) error {
		var url string
		err := tx.QueryRowContext(ctx, `SELECT status_url FROM master_games WHERE id = $1`+s.forUpdate, t.id).Scan(&url)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && url != t.url) {
			return nil
		}
		if err != nil {
			return err
		}
		if a.Game != nil {
			g := a.Game.normalized()
			old, err := loadGame(ctx, tx, t.id)
			if err != nil {
				return err
			}
			if !sameInfo(old.GameInfo, g) {
				changed = true
				if !slices.Equal(old.Mirrors, g.Mirrors) {
					if err := writeMirrors(ctx, tx, t.id, g.Mirrors); err != nil {
						return err
					}
				}
				if _, err := tx.ExecContext(ctx, `UPDATE master_games SET name = $2, world = $3, mode = $4, players = $5, capacity = $6,
					updated_us = $7 WHERE id = $1`, t.id, g.Name, g.World, g.Mode, g.Players, g.Capacity, usOf(now)); err != nil {
					return err
				}
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE master_games SET version = $2, heard = 1, heard_us = $3 WHERE id = $1`,
			t.id, int64(a.Version), usOf(now))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("apply status of %s: %w", t.id, err)
	}
	return changed, nil
}

// endRound closes a keep-alive interval: a game heard during it has missed
// none in a row, any other one more; games that reach maxMissed are
// dropped and returned, by ID.
func (s *Store) endRound(ctx context.Context, maxMissed int) (dropped []string, err error) {
	err = s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE master_games SET missed = CASE WHEN heard = 1 THEN 0 ELSE missed + 1 END, heard = 0`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM master_mirrors WHERE game_id IN (SELECT id FROM master_games WHERE missed >= $1)`, maxMissed); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `DELETE FROM master_games WHERE missed >= $1 RETURNING id`, maxMissed)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			dropped = append(dropped, id)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("end keep-alive round: %w", err)
	}
	slices.Sort(dropped)
	return dropped, nil
}

// forgiveMisses clears every game's missed count: a master that was down
// does not hold its own silence against the games.
func (s *Store) forgiveMisses(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE master_games SET missed = 0`); err != nil {
		return fmt.Errorf("forgive missed keep-alives: %w", err)
	}
	return nil
}

// counts returns the number of games and of mirrors.
func (s *Store) counts(ctx context.Context) (games, mirrors int, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM master_games), (SELECT COUNT(*) FROM master_mirrors)`).Scan(&games, &mirrors)
	if err != nil {
		return 0, 0, fmt.Errorf("count games: %w", err)
	}
	return games, mirrors, nil
}
