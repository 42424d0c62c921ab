package ctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/llmgw/llmgw/api/managev1"
)

// listOrGroup runs list when args name no subcommand (none, or flags
// first), and the group's subcommand otherwise: `projects` and
// `projects --json` list, `projects create …` creates.
func (a *app) listOrGroup(group, usage string, args []string, list func([]string) int, cmds map[string]func([]string) int) int {
	if len(args) == 0 || (strings.HasPrefix(args[0], "-") && !isHelp(args[0])) {
		return list(args)
	}
	if args[0] == "list" {
		return list(args[1:])
	}
	return a.runGroup(group, usage, args, cmds)
}

func isHelp(s string) bool {
	switch s {
	case "-h", "-help", "--help":
		return true
	}
	return false
}

// mutation runs a command that changes one object: parse, dial, call, then
// print the object as JSON (--json) or say what happened.
func mutation[M proto.Message](ctx context.Context, a *app, fs *flag.FlagSet, conn *connFlags, asJSON *bool, doing string,
	call func(ctx context.Context, c *client) (M, error), say func(w io.Writer, m M)) int {
	return a.withClient(ctx, conn, func(ctx context.Context, c *client) int {
		m, err := call(ctx, c)
		if err != nil {
			return a.rpcError(c, doing, err)
		}
		if asJSON != nil && *asJSON {
			if err := writeJSONOne(a.stdout, m); err != nil {
				return a.errorf("%v", err)
			}
			return exitOK
		}
		say(a.stdout, m)
		return exitOK
	})
}

// isSet reports whether the flag was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// splitList reads a comma-separated flag value; "" is the empty list. An
// empty entry (",,," or "a,,b") is an error: dropping it would turn a list
// with nothing in it into "every model".
func splitList(flagName, s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var out []string
	for i, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v == "" {
			return nil, fmt.Errorf(`--%s %q: entry %d is empty; list model names separated by commas, or pass --%s "" for every model`, flagName, s, i+1, flagName)
		}
		out = append(out, v)
	}
	return out, nil
}

// limitText renders a limit; 0 is "default" (auth.default_* applies).
func limitText(n int64) string {
	if n == 0 {
		return "default"
	}
	return strconv.FormatInt(n, 10)
}

// printWarnings prints each warning an object carries.
func printWarnings(w io.Writer, warnings []string) {
	for _, s := range warnings {
		fmt.Fprintf(w, "warning: %s\n", s)
	}
}

const projectsUsage = `usage: llmgw ctl projects [list|create|update|delete] ...
  projects [--json]                                      list projects with their limits
  projects create NAME [--rpm N] [--tpm N] [--allow M,M] [--threads-retain-hours H] [--memory-retain-hours H]
                                                         create a project
  projects update NAME [same flags]                      change the flags given, keep the rest
  projects delete NAME                                   delete a project without live keys (its budgets go too)
  (rpm/tpm 0: auth.default_rpm/default_tpm apply; --allow "": every model;
   retain hours 0: keep no conversations / memory notes, see docs/client-apis.md)
`

func (a *app) cmdProjects(ctx context.Context, args []string) int {
	return a.listOrGroup("projects", projectsUsage, args, func(args []string) int {
		return runQuery(ctx, a, args, query[[]*managev1.Project]{
			name: "projects", synopsis: "projects [--json]", jsonHelp: "print the projects as a JSON array (snake_case keys)",
			doing: "listing projects",
			call: func(ctx context.Context, c *client, _ string) ([]*managev1.Project, error) {
				resp, err := c.ListProjects(ctx, &managev1.ListProjectsRequest{})
				return resp.GetProjects(), err
			},
			json: writeJSON[*managev1.Project], table: writeProjects,
		})
	}, map[string]func([]string) int{
		"create": func(args []string) int { return a.projectSet(ctx, args, false) },
		"update": func(args []string) int { return a.projectSet(ctx, args, true) },
		"delete": func(args []string) int { return a.projectDelete(ctx, args) },
	})
}

func writeProjects(w io.Writer, projects []*managev1.Project) error {
	tw := newTable(w)
	row(tw, "PROJECT", "RPM", "TPM", "MODELS", "KEYS", "THREADS", "MEMORY")
	for _, p := range projects {
		models := strings.Join(p.GetAllowedModels(), ",")
		if models == "" {
			models = "all"
		}
		row(tw, p.GetName(), limitText(p.GetRpm()), limitText(p.GetTpm()), models, strconv.Itoa(int(p.GetLiveKeys())),
			retainText(p.GetThreadsRetainHours()), retainText(p.GetMemoryRetainHours()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range projects {
		for _, s := range p.GetWarnings() {
			fmt.Fprintf(w, "%s: warning: %s\n", p.GetName(), s)
		}
	}
	return nil
}

// maxRetainHours is the longest content retention the control plane
// takes (its store's MaxRetainHours): ten years.
const maxRetainHours = 87600

// retainText shows a content retention: "24h", or "off".
func retainText(hours int32) string {
	if hours <= 0 {
		return "off"
	}
	return strconv.Itoa(int(hours)) + "h"
}

func (a *app) projectSet(ctx context.Context, args []string, update bool) int {
	verb := "create"
	if update {
		verb = "update"
	}
	fs, conn := a.newAPIFlagSet("projects "+verb, "projects "+verb+" NAME [--rpm N] [--tpm N] [--allow M,M] [--json]")
	rpm := fs.Int64("rpm", 0, "requests per minute for the whole project (0: auth.default_rpm)")
	tpm := fs.Int64("tpm", 0, "tokens per minute for the whole project (0: auth.default_tpm)")
	allow := fs.String("allow", "", `comma-separated models the project may use ("": every model; an empty entry is refused)`)
	threads := fs.Int("threads-retain-hours", 0, "hours the project keeps conversations (threads, stored responses) after their last turn; 0 keeps none")
	memory := fs.Int("memory-retain-hours", 0, "hours the project keeps its agents' memory notes after their last write; 0 keeps none")
	asJSON := fs.Bool("json", false, "print the project as JSON")
	pos, code, ok := a.parse(fs, args, 1, "the project name")
	if !ok {
		return code
	}
	name := pos[0]
	for flag, h := range map[string]int{"threads-retain-hours": *threads, "memory-retain-hours": *memory} {
		if h < 0 || h > maxRetainHours {
			return a.usageErrorf(fs, "--%s must be from 0 to %d (ten years), got %d", flag, maxRetainHours, h)
		}
	}
	allowed, err := splitList("allow", *allow)
	if err != nil {
		return a.usageErrorf(fs, "%v", err)
	}
	return mutation(ctx, a, fs, conn, asJSON, verb+" project "+name, func(ctx context.Context, c *client) (*managev1.Project, error) {
		p := &managev1.Project{Name: name, Rpm: *rpm, Tpm: *tpm, AllowedModels: allowed}
		// Sent only when given: an update keeps what it does not name.
		if isSet(fs, "threads-retain-hours") {
			h := int32(*threads)
			p.ThreadsRetainHours = &h
		}
		if isSet(fs, "memory-retain-hours") {
			h := int32(*memory)
			p.MemoryRetainHours = &h
		}
		if !update {
			return c.CreateProject(ctx, &managev1.CreateProjectRequest{Project: p})
		}
		cur, err := c.GetProject(ctx, &managev1.GetProjectRequest{Name: name})
		if err != nil {
			return nil, err
		}
		if !isSet(fs, "rpm") {
			p.Rpm = cur.GetRpm()
		}
		if !isSet(fs, "tpm") {
			p.Tpm = cur.GetTpm()
		}
		if !isSet(fs, "allow") {
			p.AllowedModels = cur.GetAllowedModels()
		}
		return c.UpdateProject(ctx, &managev1.UpdateProjectRequest{Project: p})
	}, func(w io.Writer, p *managev1.Project) {
		fmt.Fprintf(w, "%sd project %s: rpm %s, tpm %s\n", verb, p.GetName(), limitText(p.GetRpm()), limitText(p.GetTpm()))
		printWarnings(w, p.GetWarnings())
	})
}

func (a *app) projectDelete(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("projects delete", "projects delete NAME")
	pos, code, ok := a.parse(fs, args, 1, "the project name")
	if !ok {
		return code
	}
	return mutation(ctx, a, fs, conn, nil, "deleting project "+pos[0], func(ctx context.Context, c *client) (*managev1.DeleteProjectResponse, error) {
		return c.DeleteProject(ctx, &managev1.DeleteProjectRequest{Name: pos[0]})
	}, func(w io.Writer, _ *managev1.DeleteProjectResponse) {
		fmt.Fprintf(w, "deleted project %s and its budgets\n", pos[0])
	})
}

// timeText renders unix milliseconds as RFC 3339 UTC, or "-" for 0.
func timeText(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}
