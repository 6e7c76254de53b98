package main

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// layers ranks the top-level directories (STYLE.md, Layout): a package may
// import the module's packages of its own rank or a lower one, never one
// above it. cmd wires everything; rebind is the engine over configfs and
// udev; configfs and udev know only their kernel interfaces.
var layers = map[string]int{
	"cmd":      3,
	"rebind":   2,
	"configfs": 1,
	"udev":     1,
}

// TestLayering reads the imports of every package's non-test files (every
// build tag: a _linux.go file counts on every platform) and fails on an
// import of a higher layer: configfs/... or udev/... importing rebind/...
// or cmd/..., rebind/... importing cmd/....
func TestLayering(t *testing.T) {
	t.Parallel()
	root, module := moduleRoot(t)
	imports, err := moduleImports(root, module)
	if err != nil {
		t.Fatal(err)
	}
	if len(imports["configfs"]) == 0 || len(imports["cmd/nvmet-rebind"]) == 0 {
		t.Fatalf("imports read under %s: %v; want configfs's and cmd/nvmet-rebind's", root, imports)
	}
	for _, v := range upwardImports(imports) {
		t.Error(v)
	}
}

// TestLayeringCatchesUpwardImports runs the check over a made-up module.
func TestLayeringCatchesUpwardImports(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for name, src := range map[string]string{
		"udev/udev.go":         "package udev\n\nimport (\n\t_ \"example.com/m/udev/backoff\"\n\t_ \"example.com/m/rebind/backoff\"\n)\n",
		"udev/udev_test.go":    "package udev\n\nimport _ \"example.com/m/cmd/x\"\n", // tests are not checked
		"udev/backoff/b.go":    "package backoff\n",
		"configfs/c_linux.go":  "package configfs\n\nimport _ \"example.com/m/cmd/x\"\n",
		"rebind/rebind.go":     "package rebind\n\nimport (\n\t_ \"example.com/m/configfs\"\n\t_ \"example.com/m/udev\"\n)\n",
		"rebind/backoff/b.go":  "package backoff\n\nimport _ \"example.com/m/cmd/x\"\n",
		"rebind/testdata/t.go": "package t\n\nimport _ \"example.com/m/cmd/x\"\n", // not a package
		"cmd/x/main.go":        "package main\n\nimport _ \"example.com/m/rebind\"\n",
		"tests/guest/g.go":     "package guest\n\nimport _ \"example.com/m/cmd/x\"\n", // not ranked
	} {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	imports, err := moduleImports(root, "example.com/m")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"configfs imports example.com/m/cmd/x, a package above it (configfs/c_linux.go:3)",
		"rebind/backoff imports example.com/m/cmd/x, a package above it (rebind/backoff/b.go:3)",
		"udev imports example.com/m/rebind/backoff, a package above it (udev/udev.go:5)",
	}
	if diff := cmp.Diff(want, upwardImports(imports)); diff != "" {
		t.Errorf("upward imports (-want +got):\n%s", diff)
	}
}

// upwardImports lists, sorted, every import of a package above the
// importer's layer.
func upwardImports(imports map[string][]moduleImport) []string {
	var out []string
	for _, dir := range slices.Sorted(maps.Keys(imports)) {
		from, ok := layers[topDir(dir)]
		if !ok {
			continue
		}
		for _, imp := range imports[dir] {
			if to, ok := layers[topDir(imp.dir)]; ok && to > from {
				out = append(out, fmt.Sprintf("%s imports %s, a package above it (%s)", dir, imp.path, imp.pos))
			}
		}
	}
	return out
}

type moduleImport struct {
	path string // the import path
	dir  string // the imported package's directory, relative to the module root
	pos  string // file:line of the import
}

// moduleImports maps every package directory under root (slash-separated,
// relative) to its non-test files' imports of module's own packages. Like
// the go tool it skips testdata and directories starting with "." or "_".
func moduleImports(root, module string) (map[string][]moduleImport, error) {
	out := map[string][]moduleImport{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		for _, spec := range f.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", path, spec.Path.Value, err)
			}
			sub, ok := strings.CutPrefix(p, module+"/")
			if !ok {
				continue
			}
			pos := fset.Position(spec.Pos())
			out[dir] = append(out[dir], moduleImport{path: p, dir: sub, pos: fmt.Sprintf("%s:%d", filepath.ToSlash(filepath.Join(rel, name)), pos.Line)})
		}
		return nil
	})
	return out, err
}

// moduleRoot finds go.mod above the working directory and returns its
// directory and module path.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			t.Fatalf("%s/go.mod: no module line (%v)", dir, sc.Err())
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// topDir is the first element of a slash-separated relative path.
func topDir(dir string) string {
	top, _, _ := strings.Cut(dir, "/")
	return top
}
