package store

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
)

// dialect is what differs between the SQL backends. Queries in this package
// use ? placeholders and SQL both SQLite and PostgreSQL accept (upsert with
// ON CONFLICT ... DO UPDATE, RETURNING); the dialect rebinds placeholders
// and classifies errors.
type dialect struct {
	name string
	// dollar rebinds ? to $1, $2, ... (PostgreSQL).
	dollar bool
	// isUniqueViolation reports whether err is a unique or primary key
	// constraint violation.
	isUniqueViolation func(err error) bool
	// migrationsDir is the directory in migrationsFS holding this
	// backend's migrations.
	migrationsDir string
	// lockName, when set, takes a transaction-scoped lock on a name
	// (PostgreSQL's advisory locks). SQLite needs none: it has one writer.
	lockName string
	// readTx are the options of a transaction that reads a consistent
	// snapshot (Copy's source); nil for the driver's default.
	readTx *sql.TxOptions
	// tablesQuery lists the names of the store's tables.
	tablesQuery string
	// afterCopy, when set, runs in Copy's destination transaction after
	// the rows are written.
	afterCopy func(ctx context.Context, tx *sql.Tx) error
	// nowMicros is an expression for the database's clock in microseconds
	// since the epoch: leases are timed by it, so control planes on
	// machines whose clocks differ agree on when a lease ends.
	nowMicros string
	// forShare locks the rows a SELECT read until the transaction ends
	// (PostgreSQL); SQLite needs none, its write transactions are
	// exclusive.
	forShare string
	// usageTxRows is the most usage rows a background writer on one
	// processor should put in one transaction (UsageTxRows); 0 for no
	// bound.
	usageTxRows int
}

// rebind returns query with its ? placeholders in the dialect's style. A ?
// inside a single-quoted string literal is left alone.
func (d dialect) rebind(query string) string {
	if !d.dollar {
		return query
	}
	return rebindDollar(query)
}

func rebindDollar(query string) string {
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	inString := false
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'':
			inString = !inString
			b.WriteByte(c)
		case c == '?' && !inString:
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
