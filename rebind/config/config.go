// Package config reads nvmet-rebind's TOML configuration
// (/etc/nvmet-rebind/config.toml) into a rebind.Config: strict (an unknown
// key, a bad prefix, overlapping subnets, a negative duration is an error
// naming the file, line and key) and refusing a file writable by group or
// others. It owns the file format, nothing else.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/nvmet-rebind/nvmet-rebind/configfs/bounded"
	"github.com/nvmet-rebind/nvmet-rebind/rebind"
)

// duration is a TOML string like "10m" or "0".
type duration struct{ time.Duration }

func (d *duration) UnmarshalText(b []byte) error {
	s := string(b)
	if s == "0" {
		d.Duration = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (use e.g. \"30s\", \"10m\", or \"0\")", clip(s))
	}
	if v < 0 {
		return fmt.Errorf("%q is negative", clip(s))
	}
	d.Duration = v
	return nil
}

type prefix struct{ netip.Prefix }

func (p *prefix) UnmarshalText(b []byte) error {
	v, err := netip.ParsePrefix(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a subnet (use e.g. \"192.0.2.0/24\", \"192.0.2.1/32\" or \"2001:db8::/64\")", clip(string(b)))
	}
	if v.Addr().Zone() != "" {
		return fmt.Errorf("%q: zoned addresses are not supported", clip(string(b)))
	}
	if v != v.Masked() {
		return fmt.Errorf("%q has host bits set; did you mean %q?", string(b), v.Masked().String())
	}
	p.Prefix = v
	return nil
}

type fileConfig struct {
	Watch []struct {
		Subnet *prefix `toml:"subnet"`
	} `toml:"watch"`
	Policy struct {
		GiveUpAfter    *duration `toml:"give_up_after"`
		PinDevice      *bool     `toml:"pin_device"`
		ResyncInterval *duration `toml:"resync_interval"`
		RescanInterval *duration `toml:"rescan_interval"`
	} `toml:"policy"`
	Boot struct {
		NvmetConfig  *string   `toml:"nvmet_config"`
		TargetConfig *string   `toml:"target_config"`
		Window       *duration `toml:"window"`
	} `toml:"boot"`
	Metrics struct {
		Textfile *string `toml:"textfile"`
	} `toml:"metrics"`
}

// maxConfigBytes bounds the config file (the reference config is a few
// KiB): the read stops there, whatever stat says.
const maxConfigBytes = 1 << 20

// LoadConfig reads and validates the file at path. A missing file is an
// error: the daemon must not run on a guess. Files writable by group or
// others are refused: they decide what is written to the kernel. path may
// be a symlink (/etc alternatives) and is followed, but what it names must
// be a regular file of at most maxConfigBytes (1 MiB): a FIFO, a device or
// a directory is refused before a byte is read, and the read itself is
// bounded (bounded.ReadFile).
func Load(path string) (rebind.Config, error) {
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return rebind.Config{}, fmt.Errorf("config %s: %w (create it from the reference config, or pass --config)", path, err)
		}
		return rebind.Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	if err := bounded.CheckMode(path, st.Mode()); err != nil {
		return rebind.Config{}, fmt.Errorf("config %w", err) // before the mode: /dev/zero is 0666
	}
	if st.Mode().Perm()&0o022 != 0 {
		return rebind.Config{}, fmt.Errorf("config %s: mode %v is writable by group or others; run chmod go-w %s", path, st.Mode().Perm(), path)
	}
	b, err := bounded.ReadFile(path, maxConfigBytes, true)
	if _, ok := errors.AsType[*bounded.Error](err); ok {
		return rebind.Config{}, fmt.Errorf("config %w", err) // names path
	}
	if err != nil {
		return rebind.Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return Parse(path, b)
}

// ParseConfig parses and validates TOML text; name is used in errors.
func Parse(name string, b []byte) (rebind.Config, error) {
	var fc fileConfig
	md, err := toml.NewDecoder(bytes.NewReader(b)).Decode(&fc)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			// The decoder's line is the lexer's, already past a newline
			// it stopped at ("[policy" then the end of the line): the
			// line is the one holding the error's first byte. Without a
			// key its text is quoted (the decoder's last key is the table
			// before, in an error inside a table header).
			line, text := lineAt(b, pe.Position.Start)
			key := ""
			if pe.LastKey != "" && !strings.Contains(pe.Message, "table name") {
				key = clip(pe.LastKey) + ": "
			}
			if key == "" {
				key = clip(strconv.Quote(text)) + ": " // no key to name: the line's text
			}
			return rebind.Config{}, fmt.Errorf("config %s: line %d: %s%s", name, line, key, clipN(pe.Message, 400))
		}
		if m := typeErr.FindStringSubmatch(err.Error()); m != nil {
			return rebind.Config{}, typeError(name, b, m[1], m[2], m[3])
		}
		return rebind.Config{}, fmt.Errorf("config %s: %s", name, clipN(err.Error(), 400))
	}
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0]
		return rebind.Config{}, fmt.Errorf("config %s: line %d: unknown key %q (known: watch.subnet, policy.give_up_after, policy.pin_device, policy.resync_interval, policy.rescan_interval, boot.nvmet_config, boot.target_config, boot.window, metrics.textfile)",
			name, keyLine(b, k), clip(k.String()))
	}
	c := rebind.DefaultConfig()
	for i, w := range fc.Watch {
		if w.Subnet == nil {
			return rebind.Config{}, fmt.Errorf("config %s: [[watch]] entry %d has no subnet", name, i+1)
		}
		c.Watch = append(c.Watch, w.Subnet.Prefix)
	}
	for i, a := range c.Watch {
		for _, o := range c.Watch[:i] {
			if a.Overlaps(o) {
				return rebind.Config{}, fmt.Errorf("config %s: line %d: watch subnet %s overlaps %s; list each subnet once", name,
					valueLine(b, a.String()), a, o)
			}
		}
	}
	if d := fc.Policy.GiveUpAfter; d != nil {
		c.GiveUpAfter = d.Duration
	}
	if p := fc.Policy.PinDevice; p != nil {
		c.PinDevice = *p
	}
	if d := fc.Policy.ResyncInterval; d != nil {
		if d.Duration < time.Second {
			return rebind.Config{}, fmt.Errorf("config %s: line %d: policy.resync_interval %v is below 1s", name, keyLine(b, toml.Key{"policy", "resync_interval"}), d.Duration)
		}
		c.ResyncInterval = d.Duration
	}
	if d := fc.Policy.RescanInterval; d != nil {
		if d.Duration != 0 && d.Duration < time.Minute {
			return rebind.Config{}, fmt.Errorf("config %s: line %d: policy.rescan_interval %v is below 1m (a full rescan reads all of configfs; 0 turns the periodic one off)", name, keyLine(b, toml.Key{"policy", "rescan_interval"}), d.Duration)
		}
		c.RescanInterval = d.Duration
	}
	if v := fc.Boot.NvmetConfig; v != nil {
		c.NvmetConfig = *v
	}
	if v := fc.Boot.TargetConfig; v != nil {
		c.TargetConfig = *v
	}
	c.BootWindow = c.GiveUpAfter
	if c.BootWindow == 0 {
		c.BootWindow = 10 * time.Minute
	}
	if v := fc.Boot.Window; v != nil {
		c.BootWindow = v.Duration
	}
	for _, f := range []struct{ key, v string }{{"boot.nvmet_config", c.NvmetConfig}, {"boot.target_config", c.TargetConfig}} {
		if f.v != "" && !filepath.IsAbs(f.v) {
			return rebind.Config{}, fmt.Errorf("config %s: line %d: %s %q must be an absolute path", name, valueLine(b, f.v), f.key, clip(f.v))
		}
	}
	if v := fc.Metrics.Textfile; v != nil && *v != "" {
		if err := checkTextfile(*v); err != nil {
			return rebind.Config{}, fmt.Errorf("config %s: line %d: metrics.textfile %w", name, keyLine(b, toml.Key{"metrics", "textfile"}), err)
		}
		c.MetricsTextfile = *v
	}
	slices.SortFunc(c.Watch, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
	return c, nil
}

// checkTextfile refuses a metrics textfile path that node_exporter's
// textfile collector would never read (it reads *.prom in one directory).
// metrics.CheckTextfile is the same rule for the command-line flag.
func checkTextfile(p string) error {
	switch {
	case !filepath.IsAbs(p):
		return fmt.Errorf("%q must be an absolute path", clip(p))
	case !strings.HasSuffix(p, ".prom") || filepath.Base(p) == ".prom":
		return fmt.Errorf("%q must end in .prom (node_exporter's textfile collector reads only *.prom)", clip(p))
	}
	return nil
}

// lineAt returns the number (from 1) and the text of the line holding
// byte off of b.
func lineAt(b []byte, off int) (int, string) {
	off = min(max(off, 0), len(b))
	start := bytes.LastIndexByte(b[:off], '\n') + 1
	end := bytes.IndexByte(b[off:], '\n')
	if end < 0 {
		end = len(b) - off
	}
	return bytes.Count(b[:off], []byte{'\n'}) + 1, strings.TrimSpace(string(b[start : off+end]))
}

// typeErr is the decoder's error for a value of the wrong TOML type, which
// is no toml.ParseError: "toml: line N (last key "k"): message" (no line
// when the decoder has none).
var typeErr = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "((?:[^"\\]|\\.)*)"\): (.*)$`)

// typeError rewrites the decoder's type error with the file, line and key
// first, Go types out, and what to write instead.
func typeError(name string, b []byte, line, key, msg string) error {
	n := 0
	fmt.Sscan(line, &n)
	if n == 0 {
		n = keyLine(b, toml.Key(strings.Split(key, ".")))
	}
	// "type mismatch for struct { … }: expected table but found int64"
	if _, found, ok := strings.Cut(msg, ": expected table but found "); ok && strings.HasPrefix(msg, "type mismatch for ") {
		msg = "incompatible types: TOML value has type " + found + "; destination has type table"
	}
	hint := map[string]string{
		"watch":                  `write [[watch]] on a line of its own and subnet = "192.0.2.0/24" under it`,
		"watch.subnet":           `write a quoted subnet, e.g. subnet = "192.0.2.0/24"`,
		"policy":                 "write [policy] on a line of its own and its keys under it",
		"policy.give_up_after":   `write a quoted duration, e.g. give_up_after = "10m"`,
		"policy.pin_device":      "write true or false, without quotes",
		"policy.resync_interval": `write a quoted duration, e.g. resync_interval = "30s"`,
		"policy.rescan_interval": `write a quoted duration, e.g. rescan_interval = "10m"`,
		"boot":                   "write [boot] on a line of its own and its keys under it",
		"boot.nvmet_config":      `write a quoted absolute path, e.g. nvmet_config = "/etc/nvmet/config.json"`,
		"boot.target_config":     `write a quoted absolute path, e.g. target_config = "/etc/rtslib-fb-target/saveconfig.json"`,
		"boot.window":            `write a quoted duration, e.g. window = "10m"`,
		"metrics":                "write [metrics] on a line of its own and its keys under it",
		"metrics.textfile":       `write a quoted absolute path ending in .prom, e.g. textfile = "/var/lib/prometheus/node-exporter/nvmet-rebind.prom"`,
	}[key]
	if hint == "" {
		hint = "see the CONFIGURATION section of nvmet-rebind(8)"
	}
	return fmt.Errorf("config %s: line %d: %s: %s: %s", name, n, clip(key), clipN(msg, 400), hint)
}

// keyLine finds the line of a key for an error message (the decoder keeps
// no position for a key it did not decode): the first line that defines
// it, as an assignment (in its table, dotted keys included) or as a
// [table] or [[table]] header; else the first line defining a key inside
// it, or a parent of it (an inline table). 0 if none.
func keyLine(b []byte, k toml.Key) int {
	if len(k) == 0 {
		return 0
	}
	near := 0
	var cur []string
	for i, line := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(line)
		var def []string
		switch {
		case strings.HasPrefix(t, "#") || t == "":
			continue
		case strings.HasPrefix(t, "["):
			h := strings.TrimPrefix(strings.TrimPrefix(t, "["), "[")
			end := strings.Index(h, "]")
			if end < 0 {
				continue
			}
			cur = splitKey(h[:end])
			def = cur
		default:
			lhs, _, ok := strings.Cut(t, "=")
			if !ok {
				continue
			}
			def = append(slices.Clip(cur), splitKey(lhs)...)
		}
		switch {
		case slices.Equal(def, k):
			return i + 1
		case near == 0 && (hasPrefix(def, k) || hasPrefix(k, def)) && len(def) > 0:
			near = i + 1
		}
	}
	return near
}

func hasPrefix(k, prefix []string) bool {
	return len(prefix) <= len(k) && slices.Equal(k[:len(prefix)], prefix)
}

// splitKey splits a TOML key (dotted, parts bare or quoted) into its parts.
func splitKey(s string) []string {
	var parts []string
	var part strings.Builder
	quote := rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			part.WriteRune(r)
		case r == '"' || r == '\'':
			quote = r
		case r == '.':
			parts = append(parts, part.String())
			part.Reset()
		case r != ' ' && r != '\t':
			part.WriteRune(r)
		}
	}
	return append(parts, part.String())
}

// valueLine finds the last line holding a quoted value, for error messages.
func valueLine(b []byte, v string) int {
	n := 0
	for i, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `"`+v+`"`) {
			n = i + 1
		}
	}
	return n
}

// clip bounds user input echoed in an error message.
func clip(s string) string { return clipN(s, 80) }

func clipN(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return s[:max] + fmt.Sprintf("…(%d bytes)", len(s))
}
