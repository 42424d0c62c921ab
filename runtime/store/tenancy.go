package store

import (
	"context"
	"errors"
	"time"

	"github.com/llmgw/llmgw/spec"
)

// ErrInUse means the object cannot be deleted while others refer to it (a
// project that still has keys, for example).
var ErrInUse = errors.New("in use")

// TenancyStore is who may use the cluster and what they used: projects,
// budgets, users and usage. API keys (APIKeyStore) belong to projects.
type TenancyStore interface {
	ProjectStore
	BudgetStore
	UserStore
	UsageStore
}

// Project is the unit of limits, budgets and keys. A zero RPM or TPM means
// "not set": the installation's defaults apply.
type Project struct {
	Name string
	RPM  int64
	TPM  int64
	// AllowedModels limits the project to these canonical model names;
	// empty allows every model.
	AllowedModels []string
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// ProjectStore holds projects. The DefaultProject always exists.
type ProjectStore interface {
	// CreateProject stores a new project; an existing name returns an error
	// wrapping ErrAlreadyExists.
	CreateProject(ctx context.Context, p Project) error
	// UpdateProject replaces the project's limits and allowed models; an
	// unknown name returns an error wrapping ErrNotFound.
	UpdateProject(ctx context.Context, p Project) error
	// GetProject returns the project or an error wrapping ErrNotFound.
	GetProject(ctx context.Context, name string) (Project, error)
	// ListProjects returns every project ordered by name.
	ListProjects(ctx context.Context) ([]Project, error)
	// DeleteProject removes the project and its budgets. A project that
	// still has unrevoked keys, and the default project, return an error
	// wrapping ErrInUse; an unknown name wraps ErrNotFound.
	DeleteProject(ctx context.Context, name string) error
}

// Budget periods and what a spent budget does: spec's words, here under
// the names the store's callers use.
const (
	PeriodDay   = spec.PeriodDay
	PeriodMonth = spec.PeriodMonth
	PeriodTotal = spec.PeriodTotal

	OnExhaustedRefuse   = spec.OnExhaustedRefuse
	OnExhaustedFallback = spec.OnExhaustedFallback
)

// Budget caps what a project may spend in a period. A project has at most
// one budget per period.
type Budget struct {
	Project string
	// Period is PeriodDay, PeriodMonth or PeriodTotal. Days and months are
	// UTC calendar days and months.
	Period string
	// Amount is in the unit the operator prices models in.
	Amount float64
	// OnExhausted is OnExhaustedRefuse or OnExhaustedFallback.
	OnExhausted string
	// FallbackModel is the model requests go to once the budget is spent,
	// when OnExhausted is OnExhaustedFallback.
	FallbackModel string
	// FallbackAllowance is what requests served by FallbackModel may spend
	// beyond Amount in the period, in the same unit: a project's spend in
	// the period never passes Amount + FallbackAllowance. 0 lets only a
	// free fallback model serve. Only with OnExhaustedFallback.
	FallbackAllowance float64
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// BudgetStore holds budgets.
type BudgetStore interface {
	// PutBudget creates or replaces the project's budget for b.Period. The
	// project must exist (ErrNotFound otherwise).
	PutBudget(ctx context.Context, b Budget) error
	// GetBudget returns the budget or an error wrapping ErrNotFound.
	GetBudget(ctx context.Context, project, period string) (Budget, error)
	// ListBudgets returns the budgets of a project, or of every project
	// when project is empty, ordered by project and period.
	ListBudgets(ctx context.Context, project string) ([]Budget, error)
	// DeleteBudget removes a budget or returns an error wrapping
	// ErrNotFound.
	DeleteBudget(ctx context.Context, project, period string) error
}

// User is a person who administers the installation. PasswordHash is a
// bcrypt hash; the password itself never reaches the store.
type User struct {
	ID           string
	Email        string
	PasswordHash string
	Admin        bool
	CreatedAt    time.Time
}

// UserStore holds users.
type UserStore interface {
	// CreateUser stores a new user; a taken ID or email returns an error
	// wrapping ErrAlreadyExists.
	CreateUser(ctx context.Context, u User) error
	// GetUser finds a user by ID or, failing that, by email; an error
	// wrapping ErrNotFound when neither matches.
	GetUser(ctx context.Context, idOrEmail string) (User, error)
	// ListUsers returns every user, oldest first.
	ListUsers(ctx context.Context) ([]User, error)
	// SetUserAdmin makes a user an administrator or takes it away.
	SetUserAdmin(ctx context.Context, id string, admin bool) error
}

// UsageRow is what one finished request used. It never holds message
// content.
type UsageRow struct {
	// ID is assigned by the store, increasing in insertion order.
	ID int64
	// At is when the request ended.
	At               time.Time
	RequestID        string
	Project          string
	KeyID            string
	Model            string
	Replica          string
	Endpoint         string
	Status           int
	PromptTokens     int64
	CompletionTokens int64
	Cost             float64
	Latency          time.Duration
	TTFT             time.Duration
	Stream           bool
	// Holder, when set, is the control plane whose budget slices the
	// row's cost is charged to (QuotaStore), in the same transaction as
	// the row. It is not stored.
	Holder string
}

// UsageQuery selects usage rows. Zero fields do not filter; Until is
// exclusive.
type UsageQuery struct {
	Project string
	Model   string
	Since   time.Time
	Until   time.Time
	// ByDay groups totals by UTC day as well as project and model.
	ByDay bool
}

// UsageTotal sums usage rows of one project and model (and day, when the
// query asked ByDay).
type UsageTotal struct {
	Project string
	Model   string
	// Day is midnight UTC of the day, or zero when not grouped by day.
	Day              time.Time
	Requests         int64
	PromptTokens     int64
	CompletionTokens int64
	Cost             float64
}

// UsageStore holds per-request usage.
type UsageStore interface {
	// InsertUsage stores the rows in one transaction: all or none.
	InsertUsage(ctx context.Context, rows []UsageRow) error
	// ProjectSpend sums the cost the project's rows recorded at or after
	// since.
	ProjectSpend(ctx context.Context, project string, since time.Time) (float64, error)
	// SummarizeUsage returns totals grouped by project, model (and day),
	// ordered by day, project and model.
	SummarizeUsage(ctx context.Context, q UsageQuery) ([]UsageTotal, error)
	// ListUsage returns matching rows in insertion order, starting after
	// the row with ID afterID, at most limit of them (limit <= 0: all).
	ListUsage(ctx context.Context, q UsageQuery, afterID int64, limit int) ([]UsageRow, error)
}
