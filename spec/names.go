package spec

import (
	"errors"
	"fmt"
	"regexp"
)

// Name rules. Each is stated once here and used by the control plane (which
// refuses a request that breaks it) and by the Terraform provider (which
// refuses the plan), so the two can never disagree.

// NameRE is the rule for model names, aliases and profile names: what
// clients type and what appears in metric labels.
var NameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// MaxNameLen is the longest model name, alias or profile name.
const MaxNameLen = 128

// NameRule says NameRE in words, for error messages and documentation.
const NameRule = "lowercase letters, digits, '.', '_' and '-', starting with a letter or digit"

// ProjectNameRE is what a project may be called: it appears in budget import
// ids (PROJECT/PERIOD), metric labels and URLs.
var ProjectNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ProjectNameRule says ProjectNameRE in words.
const ProjectNameRule = "letters, digits, '.', '_' and '-', at most 63, starting with a letter or digit"

// CheckProjectName returns why name is not a valid project name, or nil.
func CheckProjectName(name string) error {
	if name == "" {
		return errors.New("is required")
	}
	if !ProjectNameRE.MatchString(name) {
		return fmt.Errorf("%q: use %s", name, ProjectNameRule)
	}
	return nil
}

// FabricNameRE is what a fabric may be called: no white space, no slash
// (fabric names are path segments in import ids).
var FabricNameRE = regexp.MustCompile(`^[^\s/]+$`)

// CheckFabricName returns why name is not a valid fabric name, or nil.
func CheckFabricName(name string) error {
	if name == "" {
		return errors.New("is required")
	}
	if !FabricNameRE.MatchString(name) {
		return fmt.Errorf("%q: no spaces or slashes", name)
	}
	return nil
}
