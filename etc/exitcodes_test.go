package etc

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmet-rebind/nvmet-rebind/rebind/status"
)

// The exit codes have one source each: check's are rebind/status's Health
// constants, run's are the codes cmdRun gives exit() in cmd/nvmet-rebind
// (exitConfig and literals), read from the Go source. The texts that name
// them — the completions, the man page's EXIT STATUS, the alert rule
// NvmetRebindRestarting and its test, the unit's RestartPreventExitStatus=,
// the README — must say the same numbers: changing a code or a text alone
// fails here.

const mainGo = "../cmd/nvmet-rebind/main.go"

// checkCodes are check's exit codes with their names, from rebind/status.
func checkCodes() []status.Health {
	return []status.Health{status.OK, status.Warning, status.Critical, status.Unknown}
}

// runCodes reads cmd/nvmet-rebind/main.go: the value of exitConfig, the
// codes cmdRun returns through exit(), and check's Usage line.
func runCodes(t *testing.T) (exitConfig int, run []int, checkUsage string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, mainGo, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]int{}
	intOf := func(e ast.Expr) (int, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.INT {
				v, err := strconv.Atoi(e.Value)
				return v, err == nil
			}
		case *ast.Ident:
			v, ok := consts[e.Name]
			return v, ok
		}
		return 0, false
	}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if v, ok := intOf(vs.Values[i]); ok {
							consts[n.Name] = v
						}
					}
				}
			}
		}
	}
	exitConfig, ok := consts["exitConfig"]
	if !ok {
		t.Fatalf("%s: no const exitConfig", mainGo)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if n.Name.Name != "cmdRun" {
				return n.Name.Name == "newApp"
			}
			ast.Inspect(n.Body, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok || len(c.Args) != 2 {
					return true
				}
				if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "exit" {
					v, ok := intOf(c.Args[0])
					if !ok {
						t.Errorf("%s: cmdRun's exit(%s, …): not a constant this test can read", mainGo, pos(fset, c.Args[0]))
					} else if !slices.Contains(run, v) {
						run = append(run, v)
					}
				}
				return true
			})
			return false
		case *ast.CompositeLit:
			var name, usage string
			for _, e := range n.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				k, _ := kv.Key.(*ast.Ident)
				lit, _ := kv.Value.(*ast.BasicLit)
				if k == nil || lit == nil || lit.Kind != token.STRING {
					continue
				}
				s := constant.StringVal(constant.MakeFromLiteral(lit.Value, lit.Kind, 0))
				switch k.Name {
				case "Name":
					name = s
				case "Usage":
					usage = s
				}
			}
			if name == "check" {
				checkUsage = usage
			}
		}
		return true
	})
	if len(run) == 0 {
		t.Fatalf("%s: no exit(code, …) in cmdRun", mainGo)
	}
	if checkUsage == "" {
		t.Fatalf("%s: no Usage of the check command", mainGo)
	}
	slices.Sort(run)
	return exitConfig, run, checkUsage
}

func pos(fset *token.FileSet, e ast.Expr) string {
	return fset.Position(e.Pos()).String()
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), `\-`, "-")
}

// section is the text of s from the line after the first one containing
// start up to the next line containing end ("" = to the end).
func section(s, start, end string) string {
	_, after, ok := strings.Cut(s, start)
	if !ok {
		return ""
	}
	if end != "" {
		after, _, _ = strings.Cut(after, end)
	}
	return after
}

func TestExitCodesInDocs(t *testing.T) {
	t.Parallel()
	exitConfig, run, checkUsage := runCodes(t)

	// run exits 1 (a task failed), 2 (any other refused start), exitConfig
	// (a bad config): a new code must be documented below first.
	if want := []int{1, 2, exitConfig}; !slices.Equal(run, want) {
		t.Errorf("cmdRun exits %v; the docs and the alert rule describe %v: update them and this test", run, want)
	}

	// check: "N NAME" for every code, in the command's own Usage, the zsh
	// completion's description and the man page's EXIT STATUS.
	zsh := readText(t, zshPath)
	zshCheck := section(zsh, "'check:", "'\n")
	man := readText(t, manPath)
	manExit := section(man, "\n.SH EXIT STATUS\n", "\n.SH ")
	readme := readText(t, "../README.md")
	for _, h := range checkCodes() {
		code, name := strconv.Itoa(int(h)), h.String()
		if want := code + " " + name; !strings.Contains(checkUsage, want) {
			t.Errorf("check's Usage in %s does not say %q: %s", mainGo, want, checkUsage)
		}
		if want := code + " " + name; !strings.Contains(zshCheck, want) {
			t.Errorf("the zsh completion's check does not say %q: %q", want, zshCheck)
		}
		if want := ".B " + code + "\n" + name + ":"; !strings.Contains(manExit, want) {
			t.Errorf("the man page's EXIT STATUS lacks %q", want)
		}
		if want := "| " + code + " | " + name + " |"; !strings.Contains(readme, want) {
			t.Errorf("README.md's table of check's exit codes lacks %q", want)
		}
	}
	// The bash completion completes words only: it must not describe codes.
	if bash := readText(t, bashPath); strings.Contains(bash, "exit ") {
		t.Errorf("the bash completion mentions an exit code; keep the codes in the zsh descriptions and the man page")
	}

	// run: the unit does not restart a bad config; the man page, the alert
	// rule (and its test) and the README's Fleet table say which code is
	// which.
	u := readUnit(t, unitPath)
	if got := u.last("Service", "RestartPreventExitStatus"); got != strconv.Itoa(exitConfig) {
		t.Errorf("%s: RestartPreventExitStatus=%s, run's exitConfig is %d", unitPath, got, exitConfig)
	}
	cfg := strconv.Itoa(exitConfig)
	if !strings.Contains(manExit, cfg+" (EX_CONFIG)") || !strings.Contains(manExit, "RestartPreventExitStatus="+cfg) {
		t.Errorf("the man page's EXIT STATUS does not give run's %d (EX_CONFIG) and RestartPreventExitStatus=%d", exitConfig, exitConfig)
	}
	for _, path := range []string{rulesPath, rulesTestPath} {
		text := readText(t, path)
		var desc string
		for _, l := range strings.Split(text, "\n") {
			if strings.Contains(l, "journalctl -u nvmet-rebind -b") && strings.Contains(l, "description:") {
				desc = l
			}
		}
		if desc == "" {
			t.Errorf("%s: no NvmetRebindRestarting description", path)
			continue
		}
		for _, want := range []string{"exit 1", "exit 2", "exits " + cfg, "status=" + cfg + "/CONFIG"} {
			if !strings.Contains(desc, want) {
				t.Errorf("%s: NvmetRebindRestarting's description does not say %q: %s", path, want, desc)
			}
		}
		if strings.Contains(desc, "exit 2: config") {
			t.Errorf("%s: NvmetRebindRestarting says a bad config exits 2; it exits %d", path, exitConfig)
		}
	}
	fleet := section(readme, "\n## Fleet\n", "\n## ")
	row := section(fleet, "| `NvmetRebindRestarting`", "\n")
	for _, want := range []string{"exit 1", "exit 2", "exit " + cfg, "status=" + cfg + "/CONFIG"} {
		if !strings.Contains(row, want) {
			t.Errorf("README.md's Fleet row of NvmetRebindRestarting does not say %q: %s", want, row)
		}
	}
}
