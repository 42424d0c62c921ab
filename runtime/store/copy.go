package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// copyTables is every table of the schema but schema_migrations, in the
// order Copy writes them (a table before those naming its rows). A
// migration adding a table adds it here; Copy refuses a source holding a
// table missing from this list rather than leave its rows behind.
var copyTables = []string{
	"projects",
	"models",
	"api_keys",
	"admin_tokens",
	"nodes",
	"node_revocations",
	"meta",
	"fabrics",
	"budgets",
	"users",
	"usage_records",
	"content_retention",
	"stored_responses",
	"threads",
	"memory_notes",
	"node_drains",
}

// liveTables hold what running control planes coordinate with (the leader
// lease, who is running, the routes the leader published): they describe
// the processes on the source, not the installation, and are not copied;
// the control planes on the destination write them again (quota_slices:
// the slices of limits and budgets they lease; control_plane_demand: what
// each reports of its requests).
var liveTables = []string{"leader_leases", "control_planes", "fleet_state", "quota_slices", "control_plane_demand"}

// seedRows matches, per table, the rows a migration puts into a new store.
// They do not make a destination non-empty, and Copy replaces them with the
// source's.
var seedRows = map[string]string{
	// The default project always exists; untouched, it holds no limits.
	"projects": `name = 'default' AND rpm = 0 AND tpm = 0 AND allowed_models = '[]'`,
}

// copyBatchRows is how many rows go into one INSERT, kept well under both
// backends' limits on parameters per statement.
const copyBatchRows = 500

// copyMaxParams bounds the parameters of one INSERT (SQLite allows 32766,
// PostgreSQL 65535).
const copyMaxParams = 30000

// TableCount is how many rows Copy wrote into one table.
type TableCount struct {
	Table string
	Rows  int64
}

// Copy copies a whole installation from src into dst: every table, row for
// row, with the same ids, hashes, revisions and times, so API keys and
// admin tokens hashed in src authenticate against dst. dst must be empty (a
// new store: nothing but what migrations put there); Copy refuses anything
// else, naming the tables that hold rows. It reads src in one read-only
// transaction and writes dst in one transaction, so a failed copy leaves
// dst as it was; src is not written. Both stores must come from Open in
// this build (they are then at the same schema version).
//
// Copy does not follow a source being written to: stop the control plane
// first. It returns the rows written per table, in copy order.
func Copy(ctx context.Context, dst, src Store) ([]TableCount, error) {
	d, ok := dst.(*sqlStore)
	if !ok {
		return nil, fmt.Errorf("copying store: destination %T is not a store from Open", dst)
	}
	s, ok := src.(*sqlStore)
	if !ok {
		return nil, fmt.Errorf("copying store: source %T is not a store from Open", src)
	}
	if d == s || d.where == s.where {
		return nil, fmt.Errorf("copying store: the source and the destination are the same store (%s)", s.where)
	}
	what := fmt.Sprintf("copying %s to %s", s.where, d.where)
	if err := checkCopySchemas(ctx, d, s); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	counts, err := copyAll(ctx, d, s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return counts, nil
}

// checkCopySchemas checks that both stores are at the same schema version
// and that copyTables covers the source's tables.
func checkCopySchemas(ctx context.Context, d, s *sqlStore) error {
	sv, err := schemaVersion(ctx, s.r)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	dv, err := schemaVersion(ctx, d.w)
	if err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	if sv != dv {
		return fmt.Errorf("the source is at schema version %d and the destination at %d; open both with the same llmgw", sv, dv)
	}
	tables, err := listTables(ctx, s)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	for _, t := range tables {
		if t != "schema_migrations" && !slices.Contains(copyTables, t) && !slices.Contains(liveTables, t) {
			return fmt.Errorf("the source holds table %q, which this llmgw does not know how to copy", t)
		}
	}
	return nil
}

// listTables returns the names of the store's tables.
func listTables(ctx context.Context, s *sqlStore) ([]string, error) {
	return queryAll(ctx, s, "listing tables", s.d.tablesQuery, func(r scanner) (string, error) {
		var name string
		err := r.Scan(&name)
		return name, err
	})
}

func copyAll(ctx context.Context, d, s *sqlStore) (_ []TableCount, err error) {
	rtx, err := s.r.BeginTx(ctx, s.d.readTx)
	if err != nil {
		return nil, fmt.Errorf("beginning to read the source: %w", err)
	}
	// Nothing is written through rtx: rolling back ends the snapshot.
	defer func() { err = errors.Join(err, rollback(rtx)) }()
	wtx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("beginning to write the destination: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, rollback(wtx))
		}
	}()
	if err := checkEmpty(ctx, wtx, d); err != nil {
		return nil, err
	}
	var counts []TableCount
	for _, table := range copyTables {
		if seed, ok := seedRows[table]; ok {
			if _, err := wtx.ExecContext(ctx, `DELETE FROM `+table+` WHERE `+seed); err != nil {
				return nil, fmt.Errorf("clearing the destination's new-store rows of %s: %w", table, err)
			}
		}
		n, err := copyTable(ctx, wtx, d.d, rtx, table)
		if err != nil {
			return nil, fmt.Errorf("copying table %s: %w", table, err)
		}
		counts = append(counts, TableCount{Table: table, Rows: n})
	}
	if d.d.afterCopy != nil {
		if err := d.d.afterCopy(ctx, wtx); err != nil {
			return nil, err
		}
	}
	if err := wtx.Commit(); err != nil {
		return nil, fmt.Errorf("committing the destination: %w", err)
	}
	return counts, nil
}

// checkEmpty refuses a destination holding rows other than seedRows.
func checkEmpty(ctx context.Context, tx *sql.Tx, d *sqlStore) error {
	var found []string
	for _, table := range copyTables {
		q := `SELECT COUNT(*) FROM ` + table
		if seed, ok := seedRows[table]; ok {
			q += ` WHERE NOT (` + seed + `)`
		}
		var n int64
		if err := tx.QueryRowContext(ctx, q).Scan(&n); err != nil {
			return fmt.Errorf("counting rows of %s in the destination: %w", table, err)
		}
		if n > 0 {
			found = append(found, fmt.Sprintf("%s (%d rows)", table, n))
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("the destination %s is not empty: it holds %s; copy only into a new store", d.where, strings.Join(found, ", "))
	}
	return nil
}

// copyTable copies every row of table from src to dst, in batches, and
// returns how many it copied.
func copyTable(ctx context.Context, dst *sql.Tx, dd dialect, src *sql.Tx, table string) (_ int64, err error) {
	rows, err := src.QueryContext(ctx, `SELECT * FROM `+table)
	if err != nil {
		return 0, fmt.Errorf("reading: %w", err)
	}
	defer func() {
		if cerr := rows.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("reading: %w", cerr)
		}
	}()
	cols, err := rows.Columns()
	if err != nil {
		return 0, fmt.Errorf("reading columns: %w", err)
	}
	perBatch := max(1, min(copyBatchRows, copyMaxParams/len(cols)))
	one := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")"
	insert := func(args []any) error {
		n := len(args) / len(cols)
		q := `INSERT INTO ` + table + ` (` + strings.Join(cols, ", ") + `) VALUES ` +
			strings.TrimSuffix(strings.Repeat(one+", ", n), ", ")
		if _, err := dst.ExecContext(ctx, dd.rebind(q), args...); err != nil {
			return fmt.Errorf("writing %d rows: %w", n, err)
		}
		return nil
	}
	var copied int64
	batch := make([]any, 0, perBatch*len(cols))
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return copied, fmt.Errorf("reading a row: %w", err)
		}
		batch = append(batch, vals...)
		if len(batch) == perBatch*len(cols) {
			if err := insert(batch); err != nil {
				return copied, err
			}
			copied += int64(perBatch)
			batch = batch[:0]
		}
	}
	if err := rows.Err(); err != nil {
		return copied, fmt.Errorf("reading: %w", err)
	}
	if len(batch) > 0 {
		if err := insert(batch); err != nil {
			return copied, err
		}
		copied += int64(len(batch) / len(cols))
	}
	return copied, nil
}

// resetPostgresSequences moves every identity or serial column's sequence
// past the largest copied value, so rows added after a copy get new ids.
func resetPostgresSequences(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT table_name, column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND (is_identity = 'YES' OR column_default LIKE 'nextval(%')`)
	if err != nil {
		return fmt.Errorf("listing identity columns: %w", err)
	}
	type column struct{ table, name string }
	var cols []column
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.table, &c.name); err != nil {
			return errors.Join(fmt.Errorf("listing identity columns: %w", err), rows.Close())
		}
		cols = append(cols, c)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("listing identity columns: %w", err)
	}
	for _, c := range cols {
		q := fmt.Sprintf(`SELECT setval(pg_get_serial_sequence($1, $2), COALESCE(MAX(%[1]s), 1), MAX(%[1]s) IS NOT NULL) FROM %[2]s`,
			quoteIdent(c.name), quoteIdent(c.table))
		if _, err := tx.ExecContext(ctx, q, quoteIdent(c.table), c.name); err != nil {
			return fmt.Errorf("moving the sequence of %s.%s past the copied rows: %w", c.table, c.name, err)
		}
	}
	return nil
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Move copies the installation in the store fromDSN names into the new
// store toDSN names (see Copy), opening and closing both; both DSNs take
// every form Open does, "@file" included. The source must exist: a
// mistyped path is an error, not an empty installation.
func Move(ctx context.Context, fromDSN, toDSN string, opts ...Option) (_ []TableCount, err error) {
	src, err := Open(ctx, fromDSN, append(slices.Clone(opts), MustExist())...)
	if err != nil {
		return nil, fmt.Errorf("opening the source store: %w", err)
	}
	defer func() { err = errors.Join(err, src.Close()) }()
	dst, err := Open(ctx, toDSN, opts...)
	if err != nil {
		return nil, fmt.Errorf("opening the destination store: %w", err)
	}
	defer func() { err = errors.Join(err, dst.Close()) }()
	return Copy(ctx, dst, src)
}
