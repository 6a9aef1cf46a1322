package accounts

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// CreateSessionCapped stores a new session unless its account already has
// maxPeers other peer IDs with sessions issued a token since liveSince
// (revoked ones included: a token, once issued, is checked offline until
// it expires), in which case it fails with ErrTooManyPeers. A new login of
// a peer ID already counted is always allowed. The check and the insert
// are one transaction that locks the account's row, so concurrent logins
// cannot overshoot the cap.
func (s *Store) CreateSessionCapped(ctx context.Context, ss Session, liveSince time.Time, maxPeers int) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var id string
		if err := tx.QueryRowContext(ctx, s.q(`SELECT id FROM accounts WHERE id = ?`+s.dialect.forUpdate), ss.AccountID).Scan(&id); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("account %s: %w", ss.AccountID, ErrNotFound)
			}
			return err
		}
		var others int
		err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(DISTINCT peer_id) FROM sessions WHERE account_id = ? AND refreshed_us > ? AND peer_id <> ?`),
			ss.AccountID, micros(liveSince), ss.PeerID).Scan(&others)
		if err != nil {
			return err
		}
		if others >= maxPeers {
			return fmt.Errorf("%w: %d other peers have live tokens, limit %d", ErrTooManyPeers, others, maxPeers)
		}
		_, err = tx.ExecContext(ctx, s.q(`INSERT INTO sessions (id, account_id, peer_id, refresh_hash, source, created_us, refreshed_us, expires_us, revoked_us)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)`), ss.ID, ss.AccountID, ss.PeerID, ss.RefreshHash, ss.Source, micros(ss.Created), micros(ss.Created), micros(ss.Expires))
		return err
	})
	if err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	return nil
}

// LivePeers returns the peer IDs (as stored: peer.ID.String()) of the
// sessions not revoked that were issued a token since liveSince: the peers
// that can show a valid token now.
func (s *Store) LivePeers(ctx context.Context, liveSince time.Time) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT DISTINCT peer_id FROM sessions WHERE refreshed_us > ? AND revoked_us = 0`), micros(liveSince))
	if err != nil {
		return nil, fmt.Errorf("live peers: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("live peers: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("live peers: %w", err)
	}
	return out, nil
}

// KnownSource reports whether the account has a session (still stored)
// that was created by a login from source: a place its owner has logged in
// from before.
func (s *Store) KnownSource(ctx context.Context, accountID, source string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM sessions WHERE account_id = ? AND source = ?`), accountID, source).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("known source of %s: %w", accountID, err)
	}
	return n > 0, nil
}

// DeleteEndedSessions deletes the sessions that ended (expired or were
// revoked) before cutoff, with their spent refresh tokens, and returns how
// many sessions went.
func (s *Store) DeleteEndedSessions(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		const ended = `(expires_us < ? OR (revoked_us <> 0 AND revoked_us < ?))`
		c := micros(cutoff)
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM spent_refresh_tokens WHERE session_id IN (SELECT id FROM sessions WHERE `+ended+`)`), c, c); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM sessions WHERE `+ended), c, c)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete ended sessions: %w", err)
	}
	return n, nil
}
