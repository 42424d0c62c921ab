// Package tfacc gates the tests that run the real terraform CLI (Terraform
// acceptance tests, the modules', the examples'): they run when TF_ACC is
// set, as make test sets it. Elsewhere they skip, but not under CI=true,
// where a missing TF_ACC would silently skip every one of them: there they
// fail, naming the variable.
package tfacc

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// Enabled reports whether TF_ACC is set.
func Enabled() bool { return os.Getenv("TF_ACC") != "" }

// CI reports whether CI is set to a true value (.ci/run sets CI=true).
func CI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// Require skips t unless TF_ACC is set; under CI=true it fails t instead.
func Require(t testing.TB) {
	t.Helper()
	if Enabled() {
		return
	}
	if CI() {
		t.Fatal(Missing())
	}
	t.Skip("runs the real terraform: set TF_ACC=1 (and TF_ACC_TERRAFORM_PATH); make test does")
}

// Missing is the error for a CI run without TF_ACC, for a TestMain to
// print before it fails the package.
func Missing() string {
	return fmt.Sprintf("CI=%s but TF_ACC is not set: the Terraform tests would all skip; set TF_ACC=1 and TF_ACC_TERRAFORM_PATH (make test does)", os.Getenv("CI"))
}
