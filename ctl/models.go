package ctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"

	"github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/spec"
)

func (a *app) cmdModels(ctx context.Context, args []string) int {
	return runQuery(ctx, a, args, query[[]*managev1.Model]{
		name:     "models",
		synopsis: "models [--json]",
		jsonHelp: "print the models as a JSON array (snake_case keys)",
		doing:    "listing models",
		call: func(ctx context.Context, c *client, _ string) ([]*managev1.Model, error) {
			resp, err := c.ListModels(ctx, &managev1.ListModelsRequest{})
			return resp.GetModels(), err
		},
		json:  writeJSON[*managev1.Model],
		table: writeModels,
	})
}

// writeModels prints the models table, then the status message of every
// model that has one (why it is unplaced or failed).
func writeModels(w io.Writer, models []*managev1.Model) error {
	tw := newTable(w)
	row(tw, "MODEL", "SERVING", "REPLICAS", "WEIGHT", "STATUS", "ALIASES")
	for _, m := range models {
		st := m.GetStatus()
		serving := "no"
		if st.GetReplicasReady() > 0 {
			serving = "yes"
		}
		// Each profile's routing weight: what one replica of it carries
		// at once (ctl bench --save measures it).
		var weights []string
		for _, p := range m.GetProfiles() {
			weights = append(weights, fmt.Sprintf("%s:%d", p.GetName(), p.GetWeight()))
		}
		row(tw,
			m.GetName(),
			serving,
			fmt.Sprintf("%d/%d", st.GetReplicasReady(), st.GetReplicasDesired()),
			orDash(strings.Join(weights, ",")),
			modelState(st),
			orDash(strings.Join(m.GetAliases(), ",")),
		)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var notes []string
	for _, m := range models {
		if msg := m.GetStatus().GetMessage(); msg != "" {
			notes = append(notes, fmt.Sprintf("%s: %s: %s", m.GetName(), orDash(m.GetStatus().GetState()), msg))
		}
		if st := m.GetStatus().GetStalled(); st != "" {
			notes = append(notes, fmt.Sprintf("%s: rollout stuck: %s", m.GetName(), st))
		}
	}
	if len(notes) > 0 {
		_, err := fmt.Fprintf(w, "\n%s\n", strings.Join(notes, "\n"))
		return err
	}
	return nil
}

// modelState is the STATUS column: the state, with ", rollout stuck" when
// the current generation cannot be placed while older replicas serve,
// ", rolling" while outdated replicas are being replaced, and " (N stale)"
// while replicas of an earlier definition run (with rollout manual they
// wait for llmgw ctl rollout, and nothing rolls).
func modelState(st *managev1.ModelStatus) string {
	s := orDash(st.GetState())
	held := st.GetRollout() == "manual" && st.GetReplicasStale() > 0
	if st.GetStalled() != "" {
		s += ", rollout stuck"
	} else if st.GetReplicasOutdated() > 0 && !held {
		s += ", rolling"
	}
	if n := st.GetReplicasStale(); n > 0 {
		s += fmt.Sprintf(" (%d stale)", n)
	}
	return s
}

// generationNote is " (generation G)" or nothing when the server sent none.
func generationNote(g string) string {
	if g == "" {
		return ""
	}
	return " (generation " + g + ")"
}

const modelUsage = `usage: llmgw ctl model <add|get|rm> ...
  model add -f FILE [--update]   create (or update) a model from a YAML definition
  model get NAME [--json]        print a model's definition and status
  model rm NAME                  delete a model stored through the API
`

func (a *app) cmdModel(ctx context.Context, args []string) int {
	return a.runGroup("model", modelUsage, args, map[string]func([]string) int{
		"add": func(args []string) int { return a.cmdModelAdd(ctx, args) },
		"get": func(args []string) int { return a.cmdModelGet(ctx, args) },
		"rm":  func(args []string) int { return a.cmdModelRm(ctx, args) },
	})
}

func (a *app) cmdModelAdd(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("model add", "model add -f FILE [--update]")
	var file string
	fs.StringVar(&file, "f", "", "the model definition (YAML)")
	fs.StringVar(&file, "file", "", "same as -f")
	update := fs.Bool("update", false, "update the model rather than create it")
	if _, code, ok := a.parse(fs, args, 0, ""); !ok {
		return code
	}
	if file == "" {
		return a.usageErrorf(fs, "no model definition: pass -f FILE")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return a.errorf("reading model definition: %v", err)
	}
	def, err := spec.ParseModelYAML(data, file)
	if err != nil {
		return a.errorf("reading model definition: %v", err)
	}
	model := specpb.ModelToProto(def)
	return a.withClient(ctx, conn, func(ctx context.Context, c *client) int {
		verb := "updated"
		var got *managev1.Model
		if *update {
			got, err = c.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: model})
		} else {
			verb = "created"
			got, err = c.CreateModel(ctx, &managev1.CreateModelRequest{Model: model})
			if isCode(err, codes.AlreadyExists) {
				verb = "updated"
				got, err = c.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: model})
			}
		}
		if err != nil {
			doing := "creating model " + def.Name
			if verb == "updated" {
				doing = "updating model " + def.Name
			}
			return a.rpcError(c, doing, err)
		}
		fmt.Fprintf(a.stdout, "%s model %s%s\n", verb, got.GetName(), generationNote(got.GetGeneration()))
		printWarnings(a.stdout, got.GetWarnings())
		return exitOK
	})
}

func (a *app) cmdModelGet(ctx context.Context, args []string) int {
	return runQuery(ctx, a, args, query[*managev1.Model]{
		name:     "model get",
		synopsis: "model get NAME [--json]",
		arg:      "the model name",
		jsonHelp: "print the model as JSON (snake_case keys)",
		doing:    "getting model",
		call: func(ctx context.Context, c *client, name string) (*managev1.Model, error) {
			return c.GetModel(ctx, &managev1.GetModelRequest{Name: name})
		},
		json:     writeJSONOne[*managev1.Model],
		table:    writeModelDefinition,
		printing: func(name string) string { return "printing model " + name },
	})
}

// writeModelDefinition prints a model as the YAML `model add -f` reads, with
// its origin, revision and status as comments above it.
func writeModelDefinition(w io.Writer, m *managev1.Model) error {
	def, err := specpb.ModelFromProto(m)
	if err != nil {
		return fmt.Errorf("reading the control plane's answer: %w", err)
	}
	st := m.GetStatus()
	fmt.Fprintf(w, "# origin: %s, generation %s\n", orDash(m.GetOrigin()), orDash(m.GetGeneration()))
	stale := ""
	if n := st.GetReplicasStale(); n > 0 {
		stale = fmt.Sprintf(", %d stale", n)
	}
	rollout := ""
	if r := st.GetRollout(); r != "" {
		rollout = ", rollout " + r
	}
	fmt.Fprintf(w, "# status: %s, %d/%d replicas ready (%d total%s)%s\n",
		orDash(st.GetState()), st.GetReplicasReady(), st.GetReplicasDesired(), st.GetReplicasTotal(), stale, rollout)
	if msg := st.GetMessage(); msg != "" {
		fmt.Fprintf(w, "# %s\n", oneLine(msg, 200))
	}
	if n := st.GetReplicasOutdated(); n > 0 {
		fmt.Fprintf(w, "# rollout: %s of an older generation or on a draining node still serving until replaced\n", plural(int(n), "replica"))
	}
	if stalled := st.GetStalled(); stalled != "" {
		fmt.Fprintf(w, "# rollout stuck: %s\n", oneLine(stalled, 400))
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(def); err != nil {
		return err
	}
	return enc.Close()
}

func (a *app) cmdModelRm(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("model rm", "model rm NAME")
	pos, code, ok := a.parse(fs, args, 1, "the model name")
	if !ok {
		return code
	}
	return a.withClient(ctx, conn, func(ctx context.Context, c *client) int {
		if _, err := c.DeleteModel(ctx, &managev1.DeleteModelRequest{Name: pos[0]}); err != nil {
			return a.rpcError(c, "deleting model "+pos[0], err)
		}
		fmt.Fprintf(a.stdout, "deleted model %s\n", pos[0])
		return exitOK
	})
}
