package konfig

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"
)

// A configuration reference, generated from the types the loader reads:
// every key with its type, its default and what it means. docs/
// configuration.md holds it (examples/configref_test.go keeps it equal).

// Row is one key of a configuration reference.
type Row struct {
	Key, Type, Default, Meaning string
}

// FieldDocs reads the Go files of the package in dir (tests aside) and
// returns the doc comment of every struct field, keyed "importPath.Type.Field"
// as Reference looks them up.
func FieldDocs(dir, importPath string) (map[string]string, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading field docs: %w", err)
	}
	docs := map[string]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("reading field docs: %w", err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return false
			}
			for _, fld := range st.Fields.List {
				if fld.Doc == nil {
					continue
				}
				for _, name := range fld.Names {
					docs[importPath+"."+ts.Name.Name+"."+name.Name] = fld.Doc.Text()
				}
			}
			return false
		})
	}
	return docs, nil
}

// Reference lists every key of the configuration whose defaults are given
// (a struct), in declaration order: nested structs as a.b, lists of
// structs as a[].b, a pointer to a struct as its fields. docs are field doc
// comments (FieldDocs). A comment's line "Default: X." sets the default
// column (for "required", or a default computed from other keys); otherwise
// it is the value in defaults. A line "Type: X." names the type (address,
// path) where the Go type says only string. The meaning is the rest of the
// comment on one line, without the leading field name (and "is" or "are").
func Reference(defaults any, docs map[string]string) []Row {
	var rows []Row
	walk(reflect.ValueOf(defaults), "", docs, &rows)
	return rows
}

func walk(v reflect.Value, prefix string, docs map[string]string, rows *[]Row) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("koanf")
		name, opts, _ := strings.Cut(tag, ",")
		if tag == "-" {
			continue
		}
		fv := v.Field(i)
		if (f.Anonymous || strings.Contains(opts, "squash")) && f.Type.Kind() == reflect.Struct && name == "" {
			walk(fv, prefix, docs, rows)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		key := join(prefix, name)
		doc := docs[t.PkgPath()+"."+t.Name()+"."+f.Name]
		meaning, def, typ, hasDef := splitDoc(f.Name, doc)
		ft := f.Type
		if ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct && !isText(ft.Elem()) {
			if fv.IsNil() {
				fv = reflect.New(ft.Elem())
			}
			fv = fv.Elem()
			if meaning != "" {
				if !hasDef {
					def = "none"
				}
				*rows = append(*rows, Row{Key: key, Type: "object", Default: def, Meaning: meaning})
			}
			walk(fv, key, docs, rows)
			continue
		}
		switch {
		case ft.Kind() == reflect.Struct && !isText(ft):
			walk(fv, key, docs, rows)
			continue
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			if !hasDef {
				def = "none"
			}
			*rows = append(*rows, Row{Key: key, Type: "list", Default: def, Meaning: meaning})
			elem := reflect.New(ft.Elem()).Elem()
			if fv.Len() > 0 {
				elem = fv.Index(0)
			}
			walk(elem, key+"[]", docs, rows)
			continue
		}
		if !hasDef {
			def = formatDefault(fv)
		}
		if typ == "" {
			typ = typeName(ft)
		}
		*rows = append(*rows, Row{Key: key, Type: typ, Default: def, Meaning: meaning})
	}
}

// splitDoc turns a field's doc comment into its one-line meaning and its
// "Default:" line, if any.
func splitDoc(field, doc string) (meaning, def, typ string, hasDef bool) {
	var kept []string
	for _, line := range strings.Split(strings.TrimSpace(doc), "\n") {
		line = strings.TrimSpace(line)
		if d, ok := strings.CutPrefix(line, "Default: "); ok {
			def, hasDef = strings.TrimSuffix(d, "."), true
			continue
		}
		if t, ok := strings.CutPrefix(line, "Type: "); ok {
			typ = strings.TrimSuffix(t, ".")
			continue
		}
		kept = append(kept, line)
	}
	meaning = strings.Join(strings.Fields(strings.Join(kept, " ")), " ")
	if rest, ok := strings.CutPrefix(meaning, field+" "); ok {
		meaning = rest
		for _, verb := range []string{"is ", "are "} {
			if r, ok := strings.CutPrefix(rest, verb); ok {
				meaning = r
				break
			}
		}
	}
	return meaning, def, typ, hasDef
}

// typeName is how the reference names a Go type.
func typeName(t reflect.Type) string {
	switch {
	case isDuration(t):
		return "duration"
	case t.Kind() == reflect.Bool:
		return "bool"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "int"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "number"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() == reflect.Slice:
		return "list of " + typeName(t.Elem()) + "s"
	case t.Kind() == reflect.Map:
		return "map of " + typeName(t.Elem()) + "s"
	}
	return t.Kind().String()
}

// formatDefault renders a default value: `5s`, `8080`, `true`, `""`, or
// none for an empty list or map.
func formatDefault(v reflect.Value) string {
	if isDuration(v.Type()) {
		d := time.Duration(v.Int())
		if d == 0 {
			return "`0`"
		}
		s := d.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return "`" + s + "`"
	}
	switch v.Kind() {
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			return "none"
		}
		if v.Kind() == reflect.Map {
			keys := v.MapKeys()
			sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
			var parts []string
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%v: %v", k, v.MapIndex(k)))
			}
			return "`{" + strings.Join(parts, ", ") + "}`"
		}
		var parts []string
		for i := 0; i < v.Len(); i++ {
			parts = append(parts, fmt.Sprint(v.Index(i)))
		}
		return "`[" + strings.Join(parts, ", ") + "]`"
	case reflect.String:
		if v.String() == "" {
			return "`\"\"`"
		}
	}
	return "`" + fmt.Sprint(v.Interface()) + "`"
}

// Markdown renders rows as a table with the columns Key, Type, Default and
// Meaning.
func Markdown(rows []Row) string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Meaning |\n| --- | --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.Key, r.Type, r.Default, strings.ReplaceAll(r.Meaning, "|", "\\|"))
	}
	return b.String()
}
