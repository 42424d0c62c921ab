package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ---- projects ---------------------------------------------------------

const projectColumns = `name, rpm, tpm, allowed_models, created_at, updated_at`

func checkProject(p Project) error {
	if err := checkName("project", p.Name); err != nil {
		return err
	}
	if p.RPM < 0 || p.TPM < 0 {
		return fmt.Errorf("project %q: rpm and tpm must not be negative", p.Name)
	}
	return nil
}

func encodeModels(models []string) (string, error) {
	if models == nil {
		models = []string{}
	}
	b, err := json.Marshal(models)
	return string(b), err
}

// CreateProject stores a new project.
func (s *sqlStore) CreateProject(ctx context.Context, p Project) error {
	if err := checkProject(p); err != nil {
		return fmt.Errorf("creating project: %w", err)
	}
	models, err := encodeModels(p.AllowedModels)
	if err != nil {
		return fmt.Errorf("creating project %q: %w", p.Name, err)
	}
	now := toDB(s.now())
	_, err = s.exec(ctx, `INSERT INTO projects (`+projectColumns+`) VALUES (?, ?, ?, ?, ?, ?)`,
		p.Name, p.RPM, p.TPM, models, now, now)
	if err != nil {
		if s.d.isUniqueViolation(err) {
			err = ErrAlreadyExists
		}
		return fmt.Errorf("creating project %q: %w", p.Name, err)
	}
	return nil
}

// UpdateProject replaces a project's limits and allowed models.
func (s *sqlStore) UpdateProject(ctx context.Context, p Project) error {
	if err := checkProject(p); err != nil {
		return fmt.Errorf("updating project: %w", err)
	}
	models, err := encodeModels(p.AllowedModels)
	if err != nil {
		return fmt.Errorf("updating project %q: %w", p.Name, err)
	}
	err = requireRow(s.exec(ctx, `UPDATE projects SET rpm = ?, tpm = ?, allowed_models = ?, updated_at = ? WHERE name = ?`,
		p.RPM, p.TPM, models, toDB(s.now()), p.Name))
	if err != nil {
		return fmt.Errorf("updating project %q: %w", p.Name, err)
	}
	return nil
}

// GetProject returns one project.
func (s *sqlStore) GetProject(ctx context.Context, name string) (Project, error) {
	p, err := scanProject(s.queryRow(ctx, `SELECT `+projectColumns+` FROM projects WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Project{}, fmt.Errorf("getting project %q: %w", name, err)
	}
	return p, nil
}

// ListProjects returns every project ordered by name.
func (s *sqlStore) ListProjects(ctx context.Context) ([]Project, error) {
	return queryAll(ctx, s, "listing projects", `SELECT `+projectColumns+` FROM projects ORDER BY name`, scanProject)
}

// DeleteProject removes a project without live keys, and its budgets.
func (s *sqlStore) DeleteProject(ctx context.Context, name string) error {
	if name == DefaultProject {
		return fmt.Errorf("deleting project %q: %w: the default project always exists", name, ErrInUse)
	}
	err := s.inProjectTx(ctx, name, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM projects WHERE name = ?
			AND NOT EXISTS (SELECT 1 FROM api_keys WHERE project = ? AND revoked_at IS NULL)`), name, name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			var one int
			if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT 1 FROM projects WHERE name = ?`), name).Scan(&one); err != nil {
				if errors.Is(err, sql.ErrNoRows) {
					return ErrNotFound
				}
				return err
			}
			return fmt.Errorf("%w: it still has API keys; revoke them first", ErrInUse)
		}
		for _, table := range []string{"budgets", "content_retention", "stored_responses", "threads", "memory_notes"} {
			if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM `+table+` WHERE project = ?`), name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("deleting project %q: %w", name, err)
	}
	return nil
}

// inProjectTx runs fn in a write transaction holding the project's lock
// (on PostgreSQL; SQLite's single writer serialises anyway), so that
// creating a key in a project and deleting that project cannot both
// succeed.
func (s *sqlStore) inProjectTx(ctx context.Context, project string, fn func(*sql.Tx) error) error {
	return s.inLockedTx(ctx, "project:"+project, fn)
}

// inLockedTx runs fn in a write transaction holding the lock of a name
// on PostgreSQL (SQLite's single writer serialises anyway).
func (s *sqlStore) inLockedTx(ctx context.Context, name string, fn func(*sql.Tx) error) (err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if s.d.lockName != "" {
		if _, err := tx.ExecContext(ctx, s.d.rebind(s.d.lockName), name); err != nil {
			return fmt.Errorf("locking %s: %w", name, err)
		}
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

func scanProject(r scanner) (Project, error) {
	var p Project
	var models string
	var created, updated int64
	if err := r.Scan(&p.Name, &p.RPM, &p.TPM, &models, &created, &updated); err != nil {
		return Project{}, err
	}
	if err := json.Unmarshal([]byte(models), &p.AllowedModels); err != nil {
		return Project{}, fmt.Errorf("project %q: allowed models: %w", p.Name, err)
	}
	if len(p.AllowedModels) == 0 {
		p.AllowedModels = nil
	}
	p.CreatedAt, p.UpdatedAt = fromDB(created), fromDB(updated)
	return p, nil
}

// ---- budgets ----------------------------------------------------------

const budgetColumns = `project, period, amount, on_exhausted, fallback_model, fallback_allowance, created_at, updated_at`

func checkBudget(b Budget) error {
	switch b.Period {
	case PeriodDay, PeriodMonth, PeriodTotal:
	default:
		return fmt.Errorf("budget of project %q: period %q: want %s, %s or %s", b.Project, b.Period, PeriodDay, PeriodMonth, PeriodTotal)
	}
	if b.Amount < 0 {
		return fmt.Errorf("budget of project %q: amount must not be negative", b.Project)
	}
	if b.FallbackAllowance < 0 {
		return fmt.Errorf("budget of project %q: fallback_allowance must not be negative", b.Project)
	}
	switch b.OnExhausted {
	case OnExhaustedRefuse:
		if b.FallbackModel != "" {
			return fmt.Errorf("budget of project %q: fallback_model is set but on_exhausted is %q", b.Project, b.OnExhausted)
		}
		if b.FallbackAllowance != 0 {
			return fmt.Errorf("budget of project %q: fallback_allowance is set but on_exhausted is %q", b.Project, b.OnExhausted)
		}
	case OnExhaustedFallback:
		if b.FallbackModel == "" {
			return fmt.Errorf("budget of project %q: on_exhausted is %q but no fallback_model is given", b.Project, b.OnExhausted)
		}
	default:
		return fmt.Errorf("budget of project %q: on_exhausted %q: want %s or %s", b.Project, b.OnExhausted, OnExhaustedRefuse, OnExhaustedFallback)
	}
	return nil
}

// PutBudget creates or replaces a budget.
func (s *sqlStore) PutBudget(ctx context.Context, b Budget) error {
	if err := checkBudget(b); err != nil {
		return fmt.Errorf("putting budget: %w", err)
	}
	now := toDB(s.now())
	res, err := s.exec(ctx, `INSERT INTO budgets (`+budgetColumns+`)
		SELECT CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS DOUBLE PRECISION), CAST(? AS TEXT), CAST(? AS TEXT),
			CAST(? AS DOUBLE PRECISION), CAST(? AS BIGINT), CAST(? AS BIGINT)
		WHERE EXISTS (SELECT 1 FROM projects WHERE name = ?)
		ON CONFLICT (project, period) DO UPDATE SET amount = excluded.amount, on_exhausted = excluded.on_exhausted,
			fallback_model = excluded.fallback_model, fallback_allowance = excluded.fallback_allowance,
			updated_at = excluded.updated_at`,
		b.Project, b.Period, b.Amount, b.OnExhausted, b.FallbackModel, b.FallbackAllowance, now, now, b.Project)
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n == 0 {
			err = fmt.Errorf("project %q: %w", b.Project, ErrNotFound)
		}
	}
	if err != nil {
		return fmt.Errorf("putting %s budget of project %q: %w", b.Period, b.Project, err)
	}
	return nil
}

// GetBudget returns one budget.
func (s *sqlStore) GetBudget(ctx context.Context, project, period string) (Budget, error) {
	b, err := scanBudget(s.queryRow(ctx, `SELECT `+budgetColumns+` FROM budgets WHERE project = ? AND period = ?`, project, period))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Budget{}, fmt.Errorf("getting %s budget of project %q: %w", period, project, err)
	}
	return b, nil
}

// ListBudgets returns budgets ordered by project and period.
func (s *sqlStore) ListBudgets(ctx context.Context, project string) ([]Budget, error) {
	if project == "" {
		return queryAll(ctx, s, "listing budgets", `SELECT `+budgetColumns+` FROM budgets ORDER BY project, period`, scanBudget)
	}
	return queryAll(ctx, s, "listing budgets", `SELECT `+budgetColumns+` FROM budgets WHERE project = ? ORDER BY period`, scanBudget, project)
}

// DeleteBudget removes a budget.
func (s *sqlStore) DeleteBudget(ctx context.Context, project, period string) error {
	if err := requireRow(s.exec(ctx, `DELETE FROM budgets WHERE project = ? AND period = ?`, project, period)); err != nil {
		return fmt.Errorf("deleting %s budget of project %q: %w", period, project, err)
	}
	return nil
}

func scanBudget(r scanner) (Budget, error) {
	var b Budget
	var created, updated int64
	if err := r.Scan(&b.Project, &b.Period, &b.Amount, &b.OnExhausted, &b.FallbackModel, &b.FallbackAllowance, &created, &updated); err != nil {
		return Budget{}, err
	}
	b.CreatedAt, b.UpdatedAt = fromDB(created), fromDB(updated)
	return b, nil
}

// ---- users ------------------------------------------------------------

const userColumns = `id, email, password_hash, admin, created_at`

func boolToDB(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// CreateUser stores a new user.
func (s *sqlStore) CreateUser(ctx context.Context, u User) error {
	if u.ID == "" || u.Email == "" || u.PasswordHash == "" {
		return fmt.Errorf("creating user %q: id, email and password hash are required", u.Email)
	}
	if u.CreatedAt.IsZero() {
		u.CreatedAt = s.now()
	}
	_, err := s.exec(ctx, `INSERT INTO users (`+userColumns+`) VALUES (?, ?, ?, ?, ?)`,
		u.ID, u.Email, u.PasswordHash, boolToDB(u.Admin), toDB(u.CreatedAt))
	if err != nil {
		if s.d.isUniqueViolation(err) {
			err = ErrAlreadyExists
		}
		return fmt.Errorf("creating user %q: %w", u.Email, err)
	}
	return nil
}

// GetUser finds a user by ID, else by email.
func (s *sqlStore) GetUser(ctx context.Context, idOrEmail string) (User, error) {
	u, err := scanUser(s.queryRow(ctx, `SELECT `+userColumns+` FROM users WHERE id = ?
		UNION ALL SELECT `+userColumns+` FROM users WHERE email = ? AND id <> ?`, idOrEmail, idOrEmail, idOrEmail))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return User{}, fmt.Errorf("getting user %q: %w", idOrEmail, err)
	}
	return u, nil
}

// ListUsers returns every user, oldest first.
func (s *sqlStore) ListUsers(ctx context.Context) ([]User, error) {
	return queryAll(ctx, s, "listing users", `SELECT `+userColumns+` FROM users ORDER BY created_at, id`, scanUser)
}

// SetUserAdmin grants or takes away administration.
func (s *sqlStore) SetUserAdmin(ctx context.Context, id string, admin bool) error {
	if err := requireRow(s.exec(ctx, `UPDATE users SET admin = ? WHERE id = ?`, boolToDB(admin), id)); err != nil {
		return fmt.Errorf("setting admin of user %q: %w", id, err)
	}
	return nil
}

func scanUser(r scanner) (User, error) {
	var u User
	var admin, created int64
	if err := r.Scan(&u.ID, &u.Email, &u.PasswordHash, &admin, &created); err != nil {
		return User{}, err
	}
	u.Admin = admin != 0
	u.CreatedAt = fromDB(created)
	return u, nil
}

// ---- usage ------------------------------------------------------------

const usageColumns = `at, request_id, project, key_id, model, replica, endpoint, status,
	prompt_tokens, completion_tokens, cost, latency_us, ttft_us, stream`

const usageColumnCount = 14

// usageChunk is how many rows go into one INSERT: well under both
// backends' parameter limits.
const usageChunk = 200

// UsageTxRows is the most rows a background writer on one processor
// should give one InsertUsage (tenancy.Recorder.flush): with SQLite a
// transaction is CPU work in this process that the Go scheduler does not
// interrupt for milliseconds; with PostgreSQL it is a round trip, and no
// bound (0) keeps batches whole. (usageChunk is another bound: the rows
// of one INSERT statement.)
func (s *sqlStore) UsageTxRows() int { return s.d.usageTxRows }

// InsertUsage stores rows in one transaction.
func (s *sqlStore) InsertUsage(ctx context.Context, rows []UsageRow) (err error) {
	if len(rows) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("recording usage: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	one := "(" + strings.TrimSuffix(strings.Repeat("?, ", usageColumnCount), ", ") + ")"
	args := make([]any, 0, usageChunk*usageColumnCount)
	for start := 0; start < len(rows); start += usageChunk {
		chunk := rows[start:min(start+usageChunk, len(rows))]
		args = args[:0]
		for _, r := range chunk {
			args = append(args, toDB(r.At), r.RequestID, r.Project, r.KeyID, r.Model, r.Replica, r.Endpoint, int64(r.Status),
				r.PromptTokens, r.CompletionTokens, r.Cost, r.Latency.Microseconds(), r.TTFT.Microseconds(), boolToDB(r.Stream))
		}
		q := `INSERT INTO usage_records (` + usageColumns + `) VALUES ` +
			strings.TrimSuffix(strings.Repeat(one+", ", len(chunk)), ", ")
		if _, err := tx.ExecContext(ctx, s.d.rebind(q), args...); err != nil {
			return fmt.Errorf("recording %d usage rows: %w", len(rows), err)
		}
	}
	if err := s.chargeSlices(ctx, tx, rows); err != nil {
		return fmt.Errorf("recording %d usage rows: %w", len(rows), err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("recording %d usage rows: %w", len(rows), err)
	}
	return nil
}

// ProjectSpend sums a project's recorded cost since a time.
func (s *sqlStore) ProjectSpend(ctx context.Context, project string, since time.Time) (float64, error) {
	var spent float64
	err := s.queryRow(ctx, `SELECT COALESCE(SUM(cost), 0) FROM usage_records WHERE project = ? AND at >= ?`,
		project, toDB(since)).Scan(&spent)
	if err != nil {
		return 0, fmt.Errorf("summing spend of project %q: %w", project, err)
	}
	return spent, nil
}

const microsPerDay = int64(24 * time.Hour / time.Microsecond)

// usageWhere builds the WHERE clause of a usage query.
func usageWhere(q UsageQuery) (string, []any) {
	var conds []string
	var args []any
	if q.Project != "" {
		conds = append(conds, "project = ?")
		args = append(args, q.Project)
	}
	if q.Model != "" {
		conds = append(conds, "model = ?")
		args = append(args, q.Model)
	}
	if !q.Since.IsZero() {
		conds = append(conds, "at >= ?")
		args = append(args, toDB(q.Since))
	}
	if !q.Until.IsZero() {
		conds = append(conds, "at < ?")
		args = append(args, toDB(q.Until))
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// SummarizeUsage returns usage totals.
func (s *sqlStore) SummarizeUsage(ctx context.Context, q UsageQuery) ([]UsageTotal, error) {
	where, args := usageWhere(q)
	day := "CAST(0 AS BIGINT)"
	group := "project, model"
	if q.ByDay {
		day = fmt.Sprintf("(at / %d) * %d", microsPerDay, microsPerDay)
		group = "day, project, model"
	}
	query := `SELECT ` + day + ` AS day, project, model, COUNT(*), CAST(SUM(prompt_tokens) AS BIGINT),
		CAST(SUM(completion_tokens) AS BIGINT), SUM(cost) FROM usage_records` + where +
		` GROUP BY ` + group + ` ORDER BY ` + group
	return queryAll(ctx, s, "summarizing usage", query, func(r scanner) (UsageTotal, error) {
		var t UsageTotal
		var day int64
		if err := r.Scan(&day, &t.Project, &t.Model, &t.Requests, &t.PromptTokens, &t.CompletionTokens, &t.Cost); err != nil {
			return UsageTotal{}, err
		}
		if q.ByDay {
			t.Day = fromDB(day)
		}
		return t, nil
	}, args...)
}

// ListUsage returns usage rows in insertion order.
func (s *sqlStore) ListUsage(ctx context.Context, q UsageQuery, afterID int64, limit int) ([]UsageRow, error) {
	where, args := usageWhere(q)
	if where == "" {
		where = " WHERE id > ?"
	} else {
		where += " AND id > ?"
	}
	args = append(args, afterID)
	query := `SELECT id, ` + usageColumns + ` FROM usage_records` + where + ` ORDER BY id`
	if limit > 0 {
		query += fmt.Sprintf(" LIMIT %d", limit)
	}
	return queryAll(ctx, s, "listing usage", query, scanUsage, args...)
}

func scanUsage(r scanner) (UsageRow, error) {
	var u UsageRow
	var at, status, latency, ttft, stream int64
	if err := r.Scan(&u.ID, &at, &u.RequestID, &u.Project, &u.KeyID, &u.Model, &u.Replica, &u.Endpoint, &status,
		&u.PromptTokens, &u.CompletionTokens, &u.Cost, &latency, &ttft, &stream); err != nil {
		return UsageRow{}, err
	}
	u.At = fromDB(at)
	u.Status = int(status)
	u.Latency = time.Duration(latency) * time.Microsecond
	u.TTFT = time.Duration(ttft) * time.Microsecond
	u.Stream = stream != 0
	return u, nil
}
