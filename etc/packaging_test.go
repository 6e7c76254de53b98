package etc

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	nfpmModule  = "github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.44.0" // as in the Makefile
	packagingMD = "packaging/README.md"
	helperPath  = "packaging/maintscript-helper"
	versionPath = "packaging/version.sh"
)

// The files of both packages, with their modes (owner root:root).
var (
	pkgFiles = map[string]string{
		"/usr/sbin/nvmet-rebind":                                    "-rwxr-xr-x",
		"/usr/lib/systemd/system/nvmet-rebind.service":              "-rw-r--r--",
		"/usr/lib/systemd/system/nvmet-rebind-trigger@.service":     "-rw-r--r--",
		"/usr/lib/udev/rules.d/90-nvmet-rebind.rules":               "-rw-r--r--",
		"/etc/nvmet-rebind/config.toml":                             "-rw-------",
		"/usr/share/nvmet-rebind/systemd-252.conf":                  "-rw-r--r--",
		"/usr/share/nvmet-rebind/prometheus/nvmet-rebind.rules.yml": "-rw-r--r--",
		"/usr/libexec/nvmet-rebind/maintscript-helper":              "-rwxr-xr-x",
		"/usr/share/man/man8/nvmet-rebind.8.gz":                     "-rw-r--r--",
		"/usr/share/bash-completion/completions/nvmet-rebind":       "-rw-r--r--",
	}
	// Directories the package owns (rpm lists exactly these; the .deb has
	// its parents too, as every .deb does).
	pkgDirs = []string{"/etc/nvmet-rebind", "/usr/share/nvmet-rebind", "/usr/share/nvmet-rebind/prometheus", "/usr/libexec/nvmet-rebind"}

	debFiles = map[string]string{
		"/usr/share/zsh/vendor-completions/_nvmet-rebind": "-rw-r--r--", // Debian's zsh fpath
		"/usr/share/doc/nvmet-rebind/copyright":           "-rw-r--r--",
		"/usr/share/doc/nvmet-rebind/changelog.gz":        "-rw-r--r--",
	}
	rpmFiles = map[string]string{
		"/usr/share/zsh/site-functions/_nvmet-rebind": "-rw-r--r--", // Fedora's zsh fpath
		"/usr/share/licenses/nvmet-rebind/LICENSE":    "-rw-r--r--",
		"/usr/share/licenses/nvmet-rebind/copyright":  "-rw-r--r--",
	}
	rpmDirs = []string{"/usr/share/licenses/nvmet-rebind"}
)

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// packaged is what the repository's file becomes in the packages: the
// binary's path is /usr/sbin, as `make install PREFIX=/usr` would write it.
func packaged(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.ReplaceAll(b, []byte("/usr/local/sbin/"), []byte("/usr/sbin/"))
}

// TestPackages builds the .deb and the .rpm with `make packages` (nfpm
// through go run), then checks them with the tools their users have:
// dpkg-deb (files, modes, owner, conffile, control, maintainer scripts, the
// installed files' content), rpm (files, modes, %config(noreplace),
// %license, scriptlets), lintian (no error, and only the warnings
// packaging/README.md lists), and the packaged binary under strace against
// the unit's filters.
func TestPackages(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: builds the .deb and .rpm (nfpm through go run: a minute the first time)")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH: make packages builds with it")
	}
	makeTool, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make not installed (apt-get install make)")
	}
	dpkgDeb, err := lookTool("dpkg-deb")
	if err != nil {
		t.Skip("dpkg-deb not installed (apt-get install dpkg): the .deb cannot be inspected")
	}
	if out, err := exec.Command(goTool, "run", nfpmModule, "--version").CombinedOutput(); err != nil {
		t.Skipf("nfpm cannot be run (go run %s, which needs the Go module proxy or a module cache holding it): %v\n%s", nfpmModule, err, tail(out, 2000))
	}

	dist := t.TempDir()
	var env []string
	if exec.Command("git", "-C", "..", "rev-parse", "HEAD").Run() != nil {
		env = append(env, "PKG_VERSION=0.0.0+test") // not a git checkout: no describe
	}
	run(t, "..", env, makeTool, "packages", "DIST="+dist)
	one := func(glob string) string {
		m, _ := filepath.Glob(filepath.Join(dist, glob))
		if len(m) != 1 {
			t.Fatalf("%s: %d files, want 1: %v", glob, len(m), m)
		}
		return m[0]
	}
	deb, rpm := one("*.deb"), one("*.rpm")
	version := strings.TrimSpace(run(t, "..", env, "sh", "etc/packaging/version.sh"))
	rpmVersion := strings.Replace(strings.TrimSpace(run(t, "..", env, "sh", "etc/packaging/version.sh", "--rpm")), " ", "-", 1)
	arch := strings.TrimSpace(run(t, "", nil, goTool, "env", "GOARCH"))
	if want := "nvmet-rebind_" + version + "_" + arch + ".deb"; filepath.Base(deb) != want {
		t.Errorf(".deb is %s, want %s", filepath.Base(deb), want)
	}
	if want := "nvmet-rebind-" + rpmVersion + "."; !strings.HasPrefix(filepath.Base(rpm), want) {
		t.Errorf(".rpm is %s, want %s<arch>.rpm", filepath.Base(rpm), want)
	}
	t.Logf("%s, %s", filepath.Base(deb), filepath.Base(rpm))

	root := t.TempDir()
	t.Run("deb", func(t *testing.T) { checkDeb(t, dpkgDeb, deb, version, arch, root) })
	t.Run("lintian", func(t *testing.T) { checkLintian(t, deb) })
	t.Run("rpm", func(t *testing.T) { checkRPM(t, rpm, rpmVersion) })
	t.Run("sandbox", func(t *testing.T) {
		systemdVersion(t)
		if _, err := exec.LookPath("strace"); err != nil {
			t.Skip("strace not installed (apt-get install strace)")
		}
		exe := filepath.Join(root, "usr/sbin/nvmet-rebind")
		if _, err := os.Stat(exe); err != nil {
			t.Skipf("the .deb was not extracted: %v", err)
		}
		checkSandbox(t, exe)
	})
}

func checkDeb(t *testing.T, dpkgDeb, deb, version, arch, root string) {
	// Files, modes, owners.
	files, dirs := map[string]string{}, map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(run(t, "", nil, dpkgDeb, "-c", deb)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb -c: %q", line)
		}
		path := strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")
		if f[1] != "root/root" {
			t.Errorf("%s owned by %s, want root/root", path, f[1])
		}
		if strings.HasPrefix(f[0], "d") {
			dirs[path] = f[0]
		} else {
			files[path] = f[0]
		}
	}
	if d := cmp.Diff(merge(pkgFiles, debFiles), files); d != "" {
		t.Errorf("files of the .deb (-want +got):\n%s", d)
	}
	for _, d := range pkgDirs {
		if dirs[d] != "drwxr-xr-x" {
			t.Errorf("directory %s: %q, want drwxr-xr-x", d, dirs[d])
		}
	}

	// Control fields.
	ctl := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(run(t, "", nil, dpkgDeb, "-f", deb)))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ": "); ok && !strings.HasPrefix(k, " ") {
			ctl[k] = v
		}
	}
	for k, want := range map[string]string{"Package": "nvmet-rebind", "Version": version, "Architecture": arch,
		"Section": "admin", "Priority": "optional", "Pre-Depends": "init-system-helpers (>= 1.54~)",
		"Homepage": projectURL(t)} {
		if ctl[k] != want {
			t.Errorf("control %s: %q, want %q", k, ctl[k], want)
		}
	}
	// No Depends: (nor Recommends:) at all today; above all never rdma-core:
	// the daemon runs, and waits for devices, without RDMA userspace.
	for _, k := range []string{"Depends", "Recommends"} {
		if v, ok := ctl[k]; ok {
			t.Errorf("control %s: %q, want none", k, v)
		}
	}
	if !regexp.MustCompile(`^[^<>]+ <[^@<>\s]+@[^@<>\s]+>$`).MatchString(ctl["Maintainer"]) {
		t.Errorf("control Maintainer: %q is not 'Name <address>'", ctl["Maintainer"])
	}
	if v, ok := ctl["License"]; ok {
		t.Errorf("control has License: %q (not a dpkg field; lintian: unknown-field)", v)
	}
	if got := run(t, "", nil, dpkgDeb, "-I", deb, "conffiles"); got != "/etc/nvmet-rebind/config.toml\n" {
		t.Errorf("conffiles: %q, want only /etc/nvmet-rebind/config.toml", got)
	}

	// Maintainer scripts: the repository's, executable.
	ctlDir := t.TempDir()
	run(t, "", nil, dpkgDeb, "-e", deb, ctlDir)
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		got, err := os.ReadFile(filepath.Join(ctlDir, s))
		if err != nil {
			t.Errorf("no %s: %v", s, err)
			continue
		}
		if want, _ := os.ReadFile(filepath.Join("packaging/deb", s)); !bytes.Equal(got, want) {
			t.Errorf("%s differs from packaging/deb/%s", s, s)
		}
		if st, _ := os.Stat(filepath.Join(ctlDir, s)); st.Mode().Perm() != 0o755 {
			t.Errorf("%s mode %v, want 0755", s, st.Mode().Perm())
		}
	}
	for _, s := range []string{"preinst", "config", "templates", "triggers"} {
		if _, err := os.Stat(filepath.Join(ctlDir, s)); err == nil {
			t.Errorf("unexpected control file %s", s)
		}
	}

	// The installed files' content.
	run(t, "", nil, dpkgDeb, "-x", deb, root)
	read := func(p string) []byte {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for pkg, repo := range map[string]string{
		"usr/lib/systemd/system/nvmet-rebind.service":              unitPath,
		"usr/lib/systemd/system/nvmet-rebind-trigger@.service":     triggerUnitPath,
		"usr/share/nvmet-rebind/systemd-252.conf":                  dropInPath,
		"usr/lib/udev/rules.d/90-nvmet-rebind.rules":               rulePath,
		"etc/nvmet-rebind/config.toml":                             "nvmet-rebind/config.toml",
		"usr/share/nvmet-rebind/prometheus/nvmet-rebind.rules.yml": rulesPath,
		"usr/libexec/nvmet-rebind/maintscript-helper":              helperPath,
		"usr/share/bash-completion/completions/nvmet-rebind":       bashPath,
		"usr/share/zsh/vendor-completions/_nvmet-rebind":           zshPath,
		"usr/share/doc/nvmet-rebind/copyright":                     "packaging/copyright",
	} {
		if got := read(pkg); !bytes.Equal(got, packaged(t, repo)) {
			t.Errorf("/%s is not etc/%s with /usr/local/sbin/ -> /usr/sbin/", pkg, repo)
		}
		if bytes.Contains(read(pkg), []byte("/usr/local/sbin/")) {
			t.Errorf("/%s still names /usr/local/sbin/", pkg)
		}
	}
	unit, err := parseUnit(read("usr/lib/systemd/system/nvmet-rebind.service"))
	if err != nil {
		t.Fatal(err)
	}
	if got := unit.last("Service", "ExecStart"); got != "/usr/sbin/nvmet-rebind run" {
		t.Errorf("packaged unit ExecStart=%q", got)
	}
	dropIn, err := parseUnit(read("usr/share/nvmet-rebind/systemd-252.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if got := dropIn.last("Service", "ExecReload"); got != "/usr/sbin/nvmet-rebind reload" {
		t.Errorf("packaged drop-in ExecReload=%q", got)
	}
	rules, err := parseUdevRules(read("usr/lib/udev/rules.d/90-nvmet-rebind.rules"))
	if err != nil || len(rules) != 1 || !slices.Contains(rules[0], udevToken{"RUN", "", "+=", "/usr/sbin/nvmet-rebind trigger"}) {
		t.Errorf("packaged udev rule: %v %v", rules, err)
	}
	if got := gunzip(t, read("usr/share/man/man8/nvmet-rebind.8.gz")); !bytes.Equal(got, packaged(t, manPath)) {
		t.Error("the man page is not etc/man/nvmet-rebind.8")
	}
	changelog := string(gunzip(t, read("usr/share/doc/nvmet-rebind/changelog.gz")))
	if !strings.HasPrefix(changelog, "nvmet-rebind ("+version+") unstable; urgency=medium\n") {
		t.Errorf("changelog does not start with this version:\n%s", changelog)
	}

	// The binary: a PIE with no shared library, this version, and every Go
	// module it links named in the copyright file.
	exe := filepath.Join(root, "usr/sbin/nvmet-rebind")
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	libs, _ := f.ImportedLibraries()
	interp := false
	for _, p := range f.Progs {
		interp = interp || p.Type == elf.PT_INTERP
	}
	f.Close()
	if f.Type != elf.ET_DYN || !interp || len(libs) != 0 {
		t.Errorf("binary: ELF type %v, interpreter %v, libraries %v; want a PIE (ET_DYN) with no library", f.Type, interp, libs)
	}
	if out := run(t, "", nil, exe, "version"); !strings.HasPrefix(out, "nvmet-rebind ") || strings.TrimSpace(out) == "nvmet-rebind dev" {
		t.Errorf("version: %q", out)
	}
	bi, err := buildinfo.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	copyright := string(read("usr/share/doc/nvmet-rebind/copyright"))
	for _, m := range bi.Deps {
		path := regexp.MustCompile(`/v\d+$`).ReplaceAllString(m.Path, "")
		if !strings.Contains(copyright, path) {
			t.Errorf("packaging/copyright does not name %s, which the binary links", path)
		}
	}
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// lintianTagRE is one tag line of lintian's output.
var lintianTagRE = regexp.MustCompile(`^([EWIPXCO]): nvmet-rebind(?: [a-z]+)?: ([a-z0-9][a-z0-9+.-]*)(?: (.*))?$`)

// keptWarnings reads the table of packaging/README.md's lintian section:
// rows "| W | `tag` | ... |". Also returns the lintian version it was made
// with ("lintian 2.116.3...").
func keptWarnings(t *testing.T) (map[string]bool, string) {
	t.Helper()
	b, err := os.ReadFile(packagingMD)
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	row := regexp.MustCompile("^\\| *W *\\| *`([a-z0-9][a-z0-9+.-]*)` *\\|")
	for _, line := range strings.Split(string(b), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			kept[m[1]] = true
		}
	}
	ver := regexp.MustCompile(`lintian (\d+\.\d+\.\d+\S*)`).FindStringSubmatch(string(b))
	if ver == nil {
		t.Fatalf("%s names no lintian version", packagingMD)
	}
	return kept, ver[1]
}

func checkLintian(t *testing.T, deb string) {
	lintian := ensureTool(t, "lintian", "lintian")
	out, err := exec.Command(lintian, "--pedantic", "--display-info", "--fail-on", "none", deb).CombinedOutput()
	if err != nil {
		t.Fatalf("lintian: %v\n%s", err, out)
	}
	kept, docVersion := keptWarnings(t)
	got := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		m := lintianTagRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		t.Logf("%s", line)
		switch m[1] {
		case "E":
			t.Errorf("lintian error: %s", line)
		case "W":
			got[m[2]] = true
			if !kept[m[2]] {
				t.Errorf("lintian warning not listed in %s: %s", packagingMD, line)
			}
		}
	}
	ver, _ := exec.Command(lintian, "--version").Output()
	for tag := range kept {
		if got[tag] {
			continue
		}
		if strings.Contains(string(ver), docVersion) {
			t.Errorf("%s keeps warning %s, which lintian %s no longer gives: drop it from the list", packagingMD, tag, docVersion)
		} else {
			t.Logf("%s keeps warning %s for lintian %s; %s does not give it", packagingMD, tag, docVersion, bytes.TrimSpace(ver))
		}
	}
}

// checkRPM: version is VERSION-RELEASE (version.sh --rpm).
func checkRPM(t *testing.T, rpmFile, version string) {
	rpm := ensureTool(t, "rpm", "rpm")
	q := func(args ...string) string {
		return run(t, "", []string{"HOME=" + t.TempDir()}, rpm, append([]string{"-qp", "--nosignature"}, append(args, rpmFile)...)...)
	}
	files, flags := map[string]string{}, map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(q("--qf", "[%{FILEMODES:perms} %{FILEUSERNAME}/%{FILEGROUPNAME} %{FILEFLAGS:fflags}: %{FILENAMES}\n]")), "\n") {
		meta, path, ok := strings.Cut(line, ": ")
		f := strings.Fields(meta)
		if !ok || len(f) < 2 {
			t.Fatalf("rpm -qp: %q", line)
		}
		if f[1] != "root/root" {
			t.Errorf("%s owned by %s, want root/root", path, f[1])
		}
		files[path] = f[0]
		if len(f) > 2 {
			flags[path] = f[2]
		}
	}
	want := merge(pkgFiles, rpmFiles)
	for _, d := range append(slices.Clone(pkgDirs), rpmDirs...) {
		want[d] = "drwxr-xr-x"
	}
	if d := cmp.Diff(want, files); d != "" {
		t.Errorf("files of the .rpm (-want +got):\n%s", d)
	}
	wantFlags := map[string]string{
		"/etc/nvmet-rebind/config.toml":              "cn", // %config(noreplace)
		"/usr/share/licenses/nvmet-rebind/LICENSE":   "l",  // %license
		"/usr/share/licenses/nvmet-rebind/copyright": "l",
	}
	if d := cmp.Diff(wantFlags, flags); d != "" {
		t.Errorf("file flags of the .rpm (-want +got):\n%s", d)
	}
	if got, want := q("--qf", "%{NAME} %{VERSION}-%{RELEASE} %{LICENSE}\n"), "nvmet-rebind "+version+" GPL-3.0-or-later\n"; got != want {
		t.Errorf("rpm header: %q, want %q", got, want)
	}
	if got, want := q("--qf", "%{URL}\n"), projectURL(t)+"\n"; got != want {
		t.Errorf("rpm URL: %q, want %q", got, want)
	}
	// What the scriptlets run (rpmbuild's Requires(post/preun/postun); nfpm
	// writes plain Requires:), and nothing else: no rdma-core. rpmlib()
	// features rpm adds by itself are not ours.
	var requires []string
	for _, r := range strings.Split(strings.TrimSpace(q("--requires")), "\n") {
		if !strings.HasPrefix(r, "rpmlib(") {
			requires = append(requires, strings.TrimSpace(r))
		}
	}
	slices.Sort(requires)
	if d := cmp.Diff(rpmRequires, requires); d != "" {
		t.Errorf("rpm -qp --requires (-want +got):\n%s", d)
	}
	scripts := q("--scripts")
	for name, file := range map[string]string{"postinstall": "post", "preuninstall": "preun", "postuninstall": "postun"} {
		body, err := os.ReadFile(filepath.Join("packaging/rpm", file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(scripts, name+" scriptlet (using /bin/sh):\n"+strings.TrimSpace(string(body))) {
			t.Errorf("the %s scriptlet is not packaging/rpm/%s:\n%s", name, file, scripts)
		}
	}
	for _, s := range []string{"preinstall", "pretrans", "posttrans"} {
		if strings.Contains(scripts, s+" scriptlet") {
			t.Errorf("unexpected %s scriptlet", s)
		}
	}
}

// rpmRequires is what the .rpm requires, sorted: its scriptlets' shell and
// systemctl.
var rpmRequires = []string{"/bin/sh", "systemd"}

// projectURL is the project's home: its module path (go.mod) as https.
func projectURL(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^module (github\.com/\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod: no github.com module path")
	}
	return "https://" + string(m[1])
}

// yamlKeys reads the block-style YAML of nfpm.yaml far enough for
// TestPackagingConfig: dotted path of every "key: value" (quotes and
// comments dropped) and the scalar items of every "- item" list under its
// key's path. Flow maps ({mode: 0644}) stay one value; list items that are
// maps ("- src: ...") are not followed.
func yamlKeys(b []byte) (scalars map[string]string, lists map[string][]string) {
	scalars, lists = map[string]string{}, map[string][]string{}
	type level struct {
		indent int
		key    string
	}
	var stack []level
	path := func() string {
		keys := make([]string, len(stack))
		for i, l := range stack {
			keys[i] = l.key
		}
		return strings.Join(keys, ".")
	}
	keyRE := regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_-]*):(?:\s+(.*))?$`)
	inBlock := -1 // indent of a |- block scalar's key, while inside it
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		indent := len(line) - len(trimmed)
		if inBlock >= 0 {
			if trimmed == "" || indent > inBlock {
				continue
			}
			inBlock = -1
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if item, ok := strings.CutPrefix(trimmed, "- "); ok {
			for len(stack) > 0 && stack[len(stack)-1].indent > indent {
				stack = stack[:len(stack)-1]
			}
			if !keyRE.MatchString(item) {
				lists[path()] = append(lists[path()], strings.Trim(strings.TrimSpace(item), `"'`))
			}
			continue
		}
		m := keyRE.FindStringSubmatch(trimmed)
		if m == nil {
			continue
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, level{indent, m[1]})
		v := strings.TrimSpace(m[2])
		if i := strings.Index(v, " #"); i >= 0 {
			v = strings.TrimSpace(v[:i])
		}
		if v == "|-" || v == "|" || v == ">" {
			inBlock = indent
			continue
		}
		if v != "" {
			scalars[path()] = strings.Trim(v, `"'`)
		}
	}
	return scalars, lists
}

// TestPackagingConfig checks nfpm.yaml's metadata without building (what
// TestPackages checks in the built packages too): the homepage is the
// project's, the .rpm requires what its scriptlets run, and neither package
// depends on rdma-core or anything else.
func TestPackagingConfig(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("packaging/nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	scalars, lists := yamlKeys(b)
	if got, want := scalars["homepage"], projectURL(t); got != want {
		t.Errorf("nfpm.yaml homepage: %q, want %q", got, want)
	}
	if got := scalars["name"]; got != "nvmet-rebind" {
		t.Errorf("yamlKeys: name %q (the parser is off)", got)
	}
	if got := lists["deb.predepends"]; !slices.Equal(got, []string{"init-system-helpers (>= 1.54~)"}) {
		t.Errorf("nfpm.yaml deb.predepends: %q", got)
	}
	got := slices.Sorted(slices.Values(lists["overrides.rpm.depends"]))
	if !slices.Equal(got, rpmRequires) {
		t.Errorf("nfpm.yaml overrides.rpm.depends: %q, want %q", got, rpmRequires)
	}
	for path, items := range lists {
		last := path[strings.LastIndex(path, ".")+1:]
		switch last {
		case "depends", "predepends", "recommends", "suggests":
		default:
			continue
		}
		if path != "overrides.rpm.depends" && path != "deb.predepends" {
			t.Errorf("nfpm.yaml %s: %q; the packages have no other relations (packaging/README.md)", path, items)
		}
		for _, it := range items {
			if strings.Contains(it, "rdma") {
				t.Errorf("nfpm.yaml %s names %q: the daemon runs without RDMA userspace", path, it)
			}
		}
	}
}

// --- the scripts, without building anything ------------------------------

// TestMaintainerScripts: every maintainer script parses as POSIX sh (dash,
// Debian's /bin/sh, when installed), and the .deb's stop on the first error.
func TestMaintainerScripts(t *testing.T) {
	t.Parallel()
	shells := []string{"sh"}
	if _, err := exec.LookPath("dash"); err == nil {
		shells = append(shells, "dash")
	}
	scripts, _ := filepath.Glob("packaging/deb/*")
	rpm, _ := filepath.Glob("packaging/rpm/*")
	scripts = append(append(scripts, rpm...), helperPath, versionPath)
	if len(scripts) != 8 {
		t.Errorf("%d scripts: %v", len(scripts), scripts)
	}
	for _, s := range scripts {
		for _, sh := range shells {
			if out, err := exec.Command(sh, "-n", s).CombinedOutput(); err != nil {
				t.Errorf("%s -n %s: %v\n%s", sh, s, err, out)
			}
		}
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(s, "packaging/deb/") && (!bytes.HasPrefix(b, []byte("#!/bin/sh\n")) || !bytes.Contains(b, []byte("\nset -e\n"))) {
			t.Errorf("%s: a .deb maintainer script starts with #!/bin/sh and runs under set -e", s)
		}
		if st, _ := os.Stat(s); !strings.HasPrefix(s, "packaging/rpm/") && st.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s is not executable", s)
		}
	}
}

// TestMaintscriptHelper runs the helper against a scratch root with a fake
// systemctl: the drop-in is installed for systemd 252, replaced on the next
// run, removed for 257 or without systemd (an admin's file next to it
// stays); the metrics textfile the config names is removed, nothing else.
func TestMaintscriptHelper(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"sh", "awk", "sed"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	helper, err := filepath.Abs(helperPath)
	if err != nil {
		t.Fatal(err)
	}
	root, bin := t.TempDir(), t.TempDir()
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	template := string(packaged(t, dropInPath))
	write(filepath.Join(root, "usr/share/nvmet-rebind/systemd-252.conf"), template, 0o644)
	systemd := func(version string) {
		script := "#!/bin/sh\nexit 1\n" // no systemd: systemctl fails
		if version != "" {
			script = "#!/bin/sh\n[ \"$1\" = --version ] || exit 3\necho 'systemd " + version + " (" + version + ".1-1)'\necho '+PAM +AUDIT'\n"
		}
		write(filepath.Join(bin, "systemctl"), script, 0o755)
	}
	helperRun := func(arg string) (string, error) {
		cmd := exec.Command("sh", helper, arg)
		cmd.Env = append(os.Environ(), "NVMET_REBIND_ROOT="+root, "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	mustRun := func(arg string) {
		t.Helper()
		if out, err := helperRun(arg); err != nil {
			t.Fatalf("maintscript-helper %s: %v\n%s", arg, err, out)
		}
	}
	dir := filepath.Join(root, "etc/systemd/system/nvmet-rebind.service.d")
	dropIn := filepath.Join(dir, "systemd-252.conf")
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }

	systemd("252")
	mustRun("dropin-sync")
	b, err := os.ReadFile(dropIn)
	if err != nil {
		t.Fatalf("systemd 252: no drop-in: %v", err)
	}
	if !strings.HasSuffix(string(b), template) || !strings.HasPrefix(string(b), "# Installed by the nvmet-rebind package for systemd 252 (< 253)") {
		t.Errorf("drop-in:\n%s", b)
	}
	if st, _ := os.Stat(dropIn); st.Mode().Perm() != 0o644 {
		t.Errorf("drop-in mode %v", st.Mode().Perm())
	}
	u, err := parseUnit(b)
	if err != nil || u.last("Service", "Type") != "notify" || u.last("Service", "ExecReload") != "/usr/sbin/nvmet-rebind reload" {
		t.Errorf("installed drop-in: %v %v", u, err)
	}
	write(dropIn, "stale\n", 0o644) // an upgrade replaces it
	mustRun("dropin-sync")
	if b, _ := os.ReadFile(dropIn); !strings.HasSuffix(string(b), template) {
		t.Errorf("not replaced on the next sync:\n%s", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files in %s, want the drop-in only", len(ents), dir)
	}

	systemd("257")
	mustRun("dropin-sync")
	if exists(dropIn) || exists(dir) {
		t.Error("systemd 257: the drop-in or its directory stayed")
	}
	systemd("")
	mustRun("dropin-sync")
	if exists(dir) {
		t.Error("no systemd: a drop-in directory was made")
	}
	systemd("249")
	mustRun("dropin-sync")
	override := filepath.Join(dir, "override.conf") // systemctl edit's
	write(override, "[Service]\nEnvironment=X=1\n", 0o644)
	mustRun("dropin-remove")
	if exists(dropIn) || !exists(override) {
		t.Errorf("dropin-remove: drop-in there %v, the admin's override there %v; want gone, kept", exists(dropIn), exists(override))
	}

	// The metrics textfile: the one [metrics] textfile names.
	textDir := filepath.Join(root, "var/lib/prometheus/node-exporter")
	ours, other := filepath.Join(textDir, "nvmet-rebind.prom"), filepath.Join(textDir, "smartmon.prom")
	config := filepath.Join(root, "etc/nvmet-rebind/config.toml")
	for _, tc := range []struct {
		config string
		gone   bool
	}{
		{"", false}, // no config at all
		{"[metrics]\n# textfile = \"/var/lib/prometheus/node-exporter/nvmet-rebind.prom\"\n", false},
		{"[metrics]\ntextfile = \"var/lib/prometheus/node-exporter/nvmet-rebind.prom\"\n", false}, // relative: never the daemon's
		{"[metrics]\ntextfile = \"/var/lib/prometheus/node-exporter/nvmet-rebind.txt\"\n", false},
		{"[policy]\npin_device = true\n\n[metrics]\n  textfile = \"/var/lib/prometheus/node-exporter/nvmet-rebind.prom\"  # fleet\n", true},
	} {
		write(ours, "x\n", 0o644)
		write(other, "x\n", 0o644)
		os.Remove(config)
		if tc.config != "" {
			write(config, tc.config, 0o600)
		}
		mustRun("textfile-remove")
		if exists(ours) == tc.gone || !exists(other) {
			t.Errorf("config %q: textfile there %v (want %v), another collector's file there %v", tc.config, exists(ours), !tc.gone, exists(other))
		}
	}

	if out, err := helperRun("bogus"); err == nil || !strings.Contains(out, "usage") {
		t.Errorf("unknown command: %v %s", err, out)
	}
}

// TestVersionScript: package versions from `git describe`, and that dpkg
// sorts them in the order of the commits and tags.
func TestVersionScript(t *testing.T) {
	t.Parallel()
	for describe, want := range map[string][2]string{ // .deb, .rpm
		"v1.2.3":                  {"1.2.3", "1.2.3 1"},
		"v1.2.3-dirty":            {"1.2.3+0.dirty", "1.2.3 1.0.dirty"},
		"v1.2.3-4-gabcdef0":       {"1.2.3+4.gabcdef0", "1.2.3 1.4.gabcdef0"},
		"v1.2.3-4-gabcdef0-dirty": {"1.2.3+4.gabcdef0.dirty", "1.2.3 1.4.gabcdef0.dirty"},
		"abcdef0":                 {"0.0.0+94.gabcdef0", "0.0.0 1.94.gabcdef0"},
		"abcdef0-dirty":           {"0.0.0+94.gabcdef0.dirty", "0.0.0 1.94.gabcdef0.dirty"},
		"v1.0-rc1":                {"1.0~rc1", "1.0~rc1 1"},
		"v1.0-rc1-3-g1234567":     {"1.0~rc1+3.g1234567", "1.0~rc1 1.3.g1234567"},
	} {
		for i, args := range [][]string{{versionPath, describe, "94"}, {versionPath, "--rpm", describe, "94"}} {
			out, err := exec.Command("sh", args...).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != want[i] {
				t.Errorf("%s = %q, %v; want %s", strings.Join(args, " "), out, err, want[i])
			}
		}
	}
	cmd := exec.Command("sh", versionPath, "--rpm")
	cmd.Env = append(os.Environ(), "PKG_VERSION=2.0+5.gabcdef0")
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "2.0 1.5.gabcdef0\n" {
		t.Errorf("PKG_VERSION=2.0+5.gabcdef0 version.sh --rpm = %q, %v", out, err)
	}
	for _, bad := range []string{"", "-dirty", "not-a-hash", "v", "vx.y"} {
		if out, err := exec.Command("sh", versionPath, bad).CombinedOutput(); err == nil {
			t.Errorf("version.sh %q gave %q, want an error", bad, out)
		}
	}
	if exec.Command("git", "rev-parse", "HEAD").Run() == nil {
		out, err := exec.Command("sh", versionPath).CombinedOutput()
		if err != nil || !regexp.MustCompile(`^[0-9][0-9A-Za-z.+~]*\n$`).Match(out) {
			t.Errorf("version.sh in this checkout: %q, %v", out, err)
		}
	}
	order := []string{"0.0.0+94.gabcdef0", "0.0.0+94.gabcdef0.dirty", "0.0.0+95.g1234567", "1.0~rc1", "1.0~rc1+3.g1234567", "1.0", "1.0+0.dirty", "1.0+2.gabcdef0", "1.0+2.gabcdef0.dirty", "1.0.1"}
	checked := false
	if dpkg, err := lookTool("dpkg"); err == nil {
		checked = true
		for i := 1; i < len(order); i++ {
			if err := exec.Command(dpkg, "--compare-versions", order[i-1], "lt", order[i]).Run(); err != nil {
				t.Errorf("dpkg: %s is not older than %s", order[i-1], order[i])
			}
		}
	}
	// rpm.ver compares whole version-release strings (rpm >= 4.17).
	if rpm, err := lookTool("rpm"); err == nil && exec.Command(rpm, "--eval", `%{lua: assert(rpm.ver)}`).Run() == nil {
		checked = true
		evr := func(v string) string {
			cmd := exec.Command("sh", versionPath, "--rpm")
			cmd.Env = append(os.Environ(), "PKG_VERSION="+v)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("PKG_VERSION=%s version.sh --rpm: %v\n%s", v, err, out)
			}
			return strings.Replace(strings.TrimSpace(string(out)), " ", "-", 1)
		}
		for i := 1; i < len(order); i++ {
			a, b := evr(order[i-1]), evr(order[i])
			out, err := exec.Command(rpm, "--eval", fmt.Sprintf(`%%{lua: print(rpm.ver("%s") < rpm.ver("%s"))}`, a, b)).Output()
			if err != nil || strings.TrimSpace(string(out)) != "true" {
				t.Errorf("rpm: %s is not older than %s (%q, %v)", a, b, out, err)
			}
		}
	}
	if !checked {
		t.Skip("neither dpkg nor rpm (>= 4.17) installed: the ordering is not checked")
	}
}
