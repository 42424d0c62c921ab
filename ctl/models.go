package ctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"

	"github.com/llmgw/llmgw/runtime/api/managev1"
	"github.com/llmgw/llmgw/runtime/catalog"
	"github.com/llmgw/llmgw/runtime/modelpb"
)

func (a *app) cmdModels(ctx context.Context, args []string) int {
	fs := a.newFlagSet("models", "models [--json]")
	var conn connFlags
	conn.register(fs, a.env)
	asJSON := fs.Bool("json", false, "print the models as a JSON array (snake_case keys)")
	if _, code, ok := a.parse(fs, args, 0, ""); !ok {
		return code
	}
	c, code, ok := a.dial(&conn)
	if !ok {
		return code
	}
	defer c.close()
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	resp, err := c.ListModels(cctx, &managev1.ListModelsRequest{})
	if err != nil {
		return a.rpcError(c, "listing models", err)
	}
	if *asJSON {
		if err := writeJSON(a.stdout, resp.GetModels()); err != nil {
			return a.errorf("%v", err)
		}
		return exitOK
	}
	if err := writeModels(a.stdout, resp.GetModels()); err != nil {
		return a.errorf("writing output: %v", err)
	}
	return exitOK
}

// writeModels prints the models table, then the status message of every
// model that has one (why it is unplaced or failed).
func writeModels(w io.Writer, models []*managev1.Model) error {
	tw := newTable(w)
	row(tw, "MODEL", "SERVING", "REPLICAS", "STATUS", "ALIASES")
	for _, m := range models {
		st := m.GetStatus()
		serving := "no"
		if st.GetReplicasReady() > 0 {
			serving = "yes"
		}
		row(tw,
			m.GetName(),
			serving,
			fmt.Sprintf("%d/%d", st.GetReplicasReady(), st.GetReplicasDesired()),
			orDash(st.GetState()),
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
	}
	if len(notes) > 0 {
		_, err := fmt.Fprintf(w, "\n%s\n", strings.Join(notes, "\n"))
		return err
	}
	return nil
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
	if len(args) == 0 {
		fmt.Fprint(a.stderr, modelUsage)
		return exitUsage
	}
	switch args[0] {
	case "add":
		return a.cmdModelAdd(ctx, args[1:])
	case "get":
		return a.cmdModelGet(ctx, args[1:])
	case "rm":
		return a.cmdModelRm(ctx, args[1:])
	case "help", "-h", "-help", "--help":
		fmt.Fprint(a.stdout, modelUsage)
		return exitOK
	}
	fmt.Fprintf(a.stderr, "llmgw ctl model: unknown command %q\n", args[0])
	fmt.Fprint(a.stderr, modelUsage)
	return exitUsage
}

func (a *app) cmdModelAdd(ctx context.Context, args []string) int {
	fs := a.newFlagSet("model add", "model add -f FILE [--update]")
	var conn connFlags
	conn.register(fs, a.env)
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
	def, err := catalog.ParseModelYAML(data, file)
	if err != nil {
		return a.errorf("reading model definition: %v", err)
	}
	c, code, ok := a.dial(&conn)
	if !ok {
		return code
	}
	defer c.close()
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	model := modelpb.ToProto(def)
	verb := "updated"
	var got *managev1.Model
	if *update {
		got, err = c.UpdateModel(cctx, &managev1.UpdateModelRequest{Model: model})
	} else {
		verb = "created"
		got, err = c.CreateModel(cctx, &managev1.CreateModelRequest{Model: model})
		if isCode(err, codes.AlreadyExists) {
			verb = "updated"
			got, err = c.UpdateModel(cctx, &managev1.UpdateModelRequest{Model: model})
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
	return exitOK
}

func (a *app) cmdModelGet(ctx context.Context, args []string) int {
	fs := a.newFlagSet("model get", "model get NAME [--json]")
	var conn connFlags
	conn.register(fs, a.env)
	asJSON := fs.Bool("json", false, "print the model as JSON (snake_case keys)")
	pos, code, ok := a.parse(fs, args, 1, "the model name")
	if !ok {
		return code
	}
	c, code, ok := a.dial(&conn)
	if !ok {
		return code
	}
	defer c.close()
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	m, err := c.GetModel(cctx, &managev1.GetModelRequest{Name: pos[0]})
	if err != nil {
		return a.rpcError(c, "getting model "+pos[0], err)
	}
	if *asJSON {
		if err := writeJSONOne(a.stdout, m); err != nil {
			return a.errorf("%v", err)
		}
		return exitOK
	}
	if err := writeModelDefinition(a.stdout, m); err != nil {
		return a.errorf("printing model %s: %v", pos[0], err)
	}
	return exitOK
}

// writeModelDefinition prints a model as the YAML `model add -f` reads, with
// its origin, revision and status as comments above it.
func writeModelDefinition(w io.Writer, m *managev1.Model) error {
	def, err := modelpb.FromProto(m)
	if err != nil {
		return fmt.Errorf("reading the control plane's answer: %w", err)
	}
	st := m.GetStatus()
	fmt.Fprintf(w, "# origin: %s, generation %s\n", orDash(m.GetOrigin()), orDash(m.GetGeneration()))
	fmt.Fprintf(w, "# status: %s, %d/%d replicas ready (%d total)\n",
		orDash(st.GetState()), st.GetReplicasReady(), st.GetReplicasDesired(), st.GetReplicasTotal())
	if msg := st.GetMessage(); msg != "" {
		fmt.Fprintf(w, "# %s\n", oneLine(msg, 200))
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(def); err != nil {
		return err
	}
	return enc.Close()
}

func (a *app) cmdModelRm(ctx context.Context, args []string) int {
	fs := a.newFlagSet("model rm", "model rm NAME")
	var conn connFlags
	conn.register(fs, a.env)
	pos, code, ok := a.parse(fs, args, 1, "the model name")
	if !ok {
		return code
	}
	c, code, ok := a.dial(&conn)
	if !ok {
		return code
	}
	defer c.close()
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	if _, err := c.DeleteModel(cctx, &managev1.DeleteModelRequest{Name: pos[0]}); err != nil {
		return a.rpcError(c, "deleting model "+pos[0], err)
	}
	fmt.Fprintf(a.stdout, "deleted model %s\n", pos[0])
	return exitOK
}
