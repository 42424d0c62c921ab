package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// Pool sizes for PostgreSQL. The request path reads caches and writes in
// batches, so a control plane needs few connections; several control planes
// and gateways share one server, whose max_connections is often small on a
// machine it shares with the control plane.
const (
	pgMaxOpenConns    = 10
	pgMaxIdleConns    = 4
	pgConnMaxLifetime = 30 * time.Minute
	pgConnMaxIdleTime = 5 * time.Minute
	// pgUnlockTimeout bounds releasing the migration lock when the caller's
	// context is already done.
	pgUnlockTimeout = 5 * time.Second
)

// pgMigrationLock is the pg_advisory_lock key held while migrating, so two
// control planes starting together against a new database do not both run
// a migration. Advisory locks are per database. The value is "llmgw" in
// ASCII followed by 1.
const pgMigrationLock int64 = 0x6c6c6d677701

var postgresDialect = dialect{
	name:              "postgres",
	dollar:            true,
	isUniqueViolation: isPostgresUniqueViolation,
	migrationsDir:     "migrations/postgres",
	lockName:          `SELECT pg_advisory_xact_lock(hashtext(?))`,
	readTx:            &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true},
	tablesQuery: `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`,
	afterCopy: resetPostgresSequences,
	nowMicros: `CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000000 AS BIGINT)`,
	forShare:  ` FOR SHARE`,
}

// pgUniqueViolation is SQLSTATE unique_violation.
const pgUniqueViolation = "23505"

func isPostgresUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == pgUniqueViolation
}

// describePostgres names the database in messages without the password.
func describePostgres(c *pgx.ConnConfig) string {
	return fmt.Sprintf("PostgreSQL store %s@%s/%s", c.User, net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))), c.Database)
}

func openPostgres(ctx context.Context, dsn string, o options) (_ Store, err error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message quotes the DSN with the password masked as best it
		// can; a malformed DSN defeats that, so none of it is repeated.
		return nil, errors.New("opening PostgreSQL store: the address does not parse as a PostgreSQL URL (postgres://user:password@host:5432/database?sslmode=require); it is not shown because it may hold a password")
	}
	where := describePostgres(cfg)
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(pgMaxOpenConns)
	db.SetMaxIdleConns(pgMaxIdleConns)
	db.SetConnMaxLifetime(pgConnMaxLifetime)
	db.SetConnMaxIdleTime(pgConnMaxIdleTime)
	s := &sqlStore{r: db, w: db, d: postgresDialect, where: where, now: o.now}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()
	if err := db.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", where, err)
	}
	ms, err := loadMigrations(migrationsFS, postgresDialect.migrationsDir)
	if err != nil {
		return nil, err
	}
	if err := migratePostgres(ctx, db, ms, where, o); err != nil {
		return nil, err
	}
	return s, nil
}

// migratePostgres migrates on one connection holding pgMigrationLock, so
// concurrent starts apply each migration once: the second waits for the
// lock and then finds the schema current.
func migratePostgres(ctx context.Context, db *sql.DB, ms []migration, where string, o options) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrating %s: taking a connection: %w", where, err)
	}
	defer func() {
		if cerr := conn.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("migrating %s: releasing the connection: %w", where, cerr)
		}
	}()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, pgMigrationLock); err != nil {
		return fmt.Errorf("migrating %s: taking the migration lock: %w", where, err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pgUnlockTimeout)
		defer cancel()
		if _, uerr := conn.ExecContext(uctx, `SELECT pg_advisory_unlock($1)`, pgMigrationLock); uerr != nil {
			// A session still holding the lock must not go back to the
			// pool: discarding it ends the session and the lock with it.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			if err == nil {
				err = fmt.Errorf("migrating %s: releasing the migration lock: %w", where, uerr)
			}
		}
	}()
	if o.mustExist {
		var exists bool
		if err := conn.QueryRowContext(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
			return fmt.Errorf("checking for an llmgw schema in %s: %w", where, err)
		}
		if !exists {
			return fmt.Errorf("opening %s: %w: the database holds no llmgw store", where, ErrNotFound)
		}
	}
	return migrate(ctx, conn, postgresDialect, ms, where, o.now, o.logger)
}
