package vm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Apt is the apt configuration a package comes from: the host's own (the
// zero value, for Debian 12 "bookworm" packages on a Debian 12 host), or a
// private one under the VM cache for another suite (Debian 13's
// trixie-backports kernels), with its own sources file, lists, cache and
// state. The host's apt sources are never written: the private one is
// passed to apt-get and apt-cache with -o options only.
type Apt struct {
	Dir    string   // "" = the host's configuration
	Suites []string // the private configuration's suites (component main)
}

// HostApt is the host's own apt configuration.
var HostApt = &Apt{}

// debianKeyring signs Debian's archive: the host's debian-archive-keyring
// (Debian 12's 2023.3+deb12u1 and later also carry the Debian 13 "trixie"
// archive and release keys, which sign trixie, trixie-backports and
// testing).
const debianKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// PrivateApt returns the private apt configuration for suites of Debian's
// archive (e.g. "trixie-backports"), in <cache>/apt/<suites>/.
func PrivateApt(suites ...string) (*Apt, error) {
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	return &Apt{Dir: filepath.Join(cache, "apt", strings.Join(suites, "+")), Suites: suites}, nil
}

// Private tells whether this is a private configuration.
func (a *Apt) Private() bool { return a != nil && a.Dir != "" }

// String names the configuration in messages.
func (a *Apt) String() string {
	if !a.Private() {
		return "the host's apt"
	}
	return "the private apt of " + strings.Join(a.Suites, " ")
}

// privateAptOptions are the -o options that make apt-get and apt-cache use
// only the configuration in dir: its sources, lists, cache and dpkg status
// (empty: nothing is installed there, so nothing is upgraded or resolved
// against the host), no preferences of the host's. The host's apt.conf.d
// (proxies, Check-Valid-Until…) still applies.
func privateAptOptions(dir string) []string {
	o := func(k, v string) []string { return []string{"-o", k + "=" + v} }
	var args []string
	for _, kv := range [][2]string{
		{"Dir::Etc::SourceList", filepath.Join(dir, "sources.list")},
		{"Dir::Etc::SourceParts", "/dev/null"},
		{"Dir::Etc::Preferences", "/dev/null"},
		{"Dir::Etc::PreferencesParts", "/dev/null"},
		{"Dir::State", filepath.Join(dir, "state")},
		{"Dir::State::Lists", filepath.Join(dir, "lists")},
		{"Dir::State::status", filepath.Join(dir, "status")},
		{"Dir::Cache", filepath.Join(dir, "cache")},
		{"Dir::Cache::archives", filepath.Join(dir, "cache", "archives")},
		{"Dir::Cache::pkgcache", ""},
		{"Dir::Cache::srcpkgcache", ""},
		{"APT::Architecture", "amd64"},
		{"APT::Architectures", "amd64"},
		{"Acquire::Languages", "none"},
		// Only Packages: no AppStream metadata, no Contents.
		{"Acquire::IndexTargets::deb::DEP-11::DefaultEnabled", "false"},
		{"Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled", "false"},
		{"Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled", "false"},
		{"Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled", "false"},
	} {
		args = append(args, o(kv[0], kv[1])...)
	}
	return args
}

// privateSourcesList is the private configuration's sources.list: each
// suite's main component on the mirror, signed by keyring.
func privateSourcesList(mirror, keyring string, suites []string) string {
	var b strings.Builder
	b.WriteString("# Written by the nvmet-rebind test harness: used only with apt-get -o Dir::Etc::SourceList=this file.\n")
	for _, s := range suites {
		fmt.Fprintf(&b, "deb [signed-by=%s] %s %s main\n", keyring, mirror, s)
	}
	return b.String()
}

// args returns the options to put before apt-get's or apt-cache's command.
func (a *Apt) args() []string {
	if !a.Private() {
		return nil
	}
	return privateAptOptions(a.Dir)
}

// Cache runs apt-cache with this configuration.
func (a *Apt) Cache(args ...string) (string, error) {
	out, err := run("", "apt-cache", append(a.args(), args...)...)
	return out, a.shorten(err)
}

// Get runs apt-get with this configuration in dir.
func (a *Apt) Get(dir string, args ...string) (string, error) {
	out, err := run(dir, "apt-get", append(a.args(), args...)...)
	return out, a.shorten(err)
}

// shorten replaces the private options in an error by their folder.
func (a *Apt) shorten(err error) error {
	if err == nil || !a.Private() {
		return err
	}
	return errors.New(strings.Replace(err.Error(), strings.Join(a.args(), " "), "(private config "+a.Dir+")", 1))
}

var privUpdate sync.Map // dir -> *privUpdateState

type privUpdateState struct {
	once sync.Once
	err  error
}

// Update writes the private configuration's files (sources from the mirror
// of the host's own apt sources, or NVMET_REBIND_DEBIAN_MIRROR) and runs
// apt-get update on it, once per process. It needs no root for the lists
// (they are the cache's); when it fails but earlier lists are there, those
// are used (with a note). For the host's configuration it is AptUpdate.
func (a *Apt) Update() error {
	if !a.Private() {
		return AptUpdate()
	}
	v, _ := privUpdate.LoadOrStore(a.Dir, &privUpdateState{})
	st := v.(*privUpdateState)
	st.once.Do(func() { st.err = a.update() })
	return st.err
}

func (a *Apt) update() error {
	mirror, _, err := debianMirror()
	if err != nil {
		return err
	}
	for _, d := range []string{"lists/partial", "cache/archives/partial", "state"} {
		if err := os.MkdirAll(filepath.Join(a.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(a.Dir, "status")); err != nil {
		if err := os.WriteFile(filepath.Join(a.Dir, "status"), nil, 0o644); err != nil {
			return err
		}
	}
	if _, err := os.Stat(debianKeyring); err != nil {
		return ErrSkip{fmt.Sprintf("%s is missing: apt-get install debian-archive-keyring (it signs %s)", debianKeyring, strings.Join(a.Suites, " "))}
	}
	src := privateSourcesList(mirror, debianKeyring, a.Suites)
	if err := os.WriteFile(filepath.Join(a.Dir, "sources.list"), []byte(src), 0o644); err != nil {
		return err
	}
	Log("apt-get update of %s (%s)", a, a.Dir)
	_, err = a.Get("", "update")
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), "NO_PUBKEY") {
		err = fmt.Errorf("%v: the host's %s does not hold the key that signs %s: upgrade debian-archive-keyring (Debian 12's 2023.3+deb12u1 and later carry Debian 13's keys)", err, debianKeyring, strings.Join(a.Suites, " "))
	}
	if m, _ := filepath.Glob(filepath.Join(a.Dir, "lists", "*_Packages*")); len(m) > 0 {
		Log("apt-get update of %s failed, using the lists of an earlier update: %v", a, err)
		return nil
	}
	return err
}

// debianMirror is the Debian archive (and security archive) to use:
// NVMET_REBIND_DEBIAN_MIRROR's, else the one the host's own apt sources name.
func debianMirror() (archive, security string, err error) {
	if m := strings.TrimSuffix(os.Getenv("NVMET_REBIND_DEBIAN_MIRROR"), "/"); m != "" {
		return m + "/debian", m + "/debian-security", nil
	}
	return hostDebianMirror("/etc/apt")
}
