package main

// nvmetcli-restore: nvmetcli's restore (nvmetcli 0.9 and upstream,
// nvmet/nvme.py Root.restore), step for step, for guests without Python.
// Its stopping rule is the point: an attribute refused is reported and
// skipped (err_func), an object that cannot be made is skipped, but a
// refused enable (Namespace/Referral _setup_attrs → set_enable), allowed
// host (add_allowed_host) or port link (add_subsystem) raises out of
// restore: nothing after it in the file is made, as at boot. Written from
// nvmetcli's source, independently of the daemon's own reader.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// stopped is the exception that ends nvmetcli's restore.
type stopped struct{ err error }

func (s stopped) Error() string { return s.err.Error() }

type restorer struct {
	root   string // <configfs>/nvmet
	errors []string
}

// restore runs `nvmetcli restore FILE`; it exits 1 where nvmetcli would
// end with a traceback.
func restore(args []string) int {
	if len(args) < 1 || len(args) > 2 {
		fmt.Fprintln(os.Stderr, "usage: e2eutil nvmetcli-restore FILE [CONFIGFS]")
		return 2
	}
	cfs := "/sys/kernel/config"
	if len(args) == 2 {
		cfs = args[1]
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		fatal(err)
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(b, &cfg); err != nil {
		fatal(err)
	}
	r := &restorer{root: filepath.Join(cfs, "nvmet")}
	err = r.run(cfg)
	for _, e := range r.errors {
		fmt.Println(e + ", skipped")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "nvmetcli restore: stopped: %v\n", err)
		return 1
	}
	return 0
}

func list(raw json.RawMessage) []map[string]json.RawMessage {
	var out []map[string]json.RawMessage
	_ = json.Unmarshal(raw, &out)
	return out
}

func str(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return strings.TrimSpace(string(raw))
}

func (r *restorer) run(cfg map[string]json.RawMessage) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s, ok := p.(stopped)
			if !ok {
				panic(p)
			}
			err = s
		}
	}()
	for i, h := range list(cfg["hosts"]) {
		if _, ok := h["nqn"]; !ok {
			r.errors = append(r.errors, fmt.Sprintf("'nqn' not defined in host %d", i))
			continue
		}
		dir := filepath.Join(r.root, "hosts", str(h["nqn"]))
		if !r.create(dir, "Host") {
			continue
		}
		r.setupAttrs(dir, h, "dhchap")
	}
	for i, s := range list(cfg["subsystems"]) {
		if _, ok := s["nqn"]; !ok {
			r.errors = append(r.errors, fmt.Sprintf("'nqn' not defined in subsystem %d", i))
			continue
		}
		dir := filepath.Join(r.root, "subsystems", str(s["nqn"]))
		if !r.create(dir, "Subsystem") {
			continue
		}
		for _, n := range list(s["namespaces"]) {
			if _, ok := n["nsid"]; !ok {
				r.errors = append(r.errors, "'nsid' not defined for Namespace")
				continue
			}
			nd := filepath.Join(dir, "namespaces", str(n["nsid"]))
			if !r.create(nd, "Namespace") {
				continue
			}
			r.setupAttrs(nd, n, "device", "ana", "resv")
			if g, ok := n["ana_grpid"]; ok {
				if _, err := os.Stat(filepath.Join(nd, "ana_grpid")); err == nil {
					r.must(os.WriteFile(filepath.Join(nd, "ana_grpid"), []byte(str(g)), 0))
				}
			}
		}
		var hosts []string
		_ = json.Unmarshal(s["allowed_hosts"], &hosts)
		for _, h := range hosts {
			r.must(os.Symlink(filepath.Join(r.root, "hosts", h), filepath.Join(dir, "allowed_hosts", h)))
		}
		r.setupAttrs(dir, s, "attr")
	}
	for i, p := range list(cfg["ports"]) {
		if _, ok := p["portid"]; !ok {
			r.errors = append(r.errors, fmt.Sprintf("'portid' not defined in port %d", i))
			continue
		}
		dir := filepath.Join(r.root, "ports", str(p["portid"]))
		if !r.create(dir, "Port") {
			continue
		}
		r.setupAttrs(dir, p, "addr", "param")
		var subs []string
		_ = json.Unmarshal(p["subsystems"], &subs)
		for _, s := range subs {
			r.must(os.Symlink(filepath.Join(r.root, "subsystems", s), filepath.Join(dir, "subsystems", s)))
		}
		for _, a := range list(p["ana_groups"]) {
			if _, ok := a["grpid"]; !ok {
				r.errors = append(r.errors, "'grpid' not defined for ANA Group")
				continue
			}
			ad := filepath.Join(dir, "ana_groups", str(a["grpid"]))
			if !r.create(ad, "ANA Group") {
				continue
			}
			r.setupAttrs(ad, a, "ana")
		}
		for _, f := range list(p["referrals"]) {
			if _, ok := f["name"]; !ok {
				r.errors = append(r.errors, "'name' not defined for Referral")
				continue
			}
			fd := filepath.Join(dir, "referrals", str(f["name"]))
			if !r.create(fd, "Referral") {
				continue
			}
			r.setupAttrs(fd, f, "addr")
		}
	}
	return nil
}

// create is _create_in_cfs('any'): mkdir unless it exists; a failure is
// reported ("Could not create … object") and the object skipped.
func (r *restorer) create(dir, what string) bool {
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return true
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		r.errors = append(r.errors, fmt.Sprintf("Could not create %s object: %v", what, err))
		return false
	}
	return true
}

// setupAttrs is CFSNode._setup_attrs: each group's attributes (a refusal
// reported, skipped), then "enable", whose refusal raises.
func (r *restorer) setupAttrs(dir string, obj map[string]json.RawMessage, groups ...string) {
	for _, g := range groups {
		raw, ok := obj[g]
		if !ok {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			continue
		}
		for dec.More() {
			t, _ := dec.Token()
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				break
			}
			path := filepath.Join(dir, g+"_"+fmt.Sprint(t))
			if _, err := os.Stat(path); err != nil {
				r.errors = append(r.errors, "Cannot find attribute: "+path)
				continue
			}
			if err := os.WriteFile(path, []byte(str(v)), 0); err != nil {
				r.errors = append(r.errors, fmt.Sprintf("Cannot set attribute %s: %v", path, err))
			}
		}
	}
	if e, ok := obj["enable"]; ok {
		if err := os.WriteFile(filepath.Join(dir, "enable"), []byte(str(e)), 0); err != nil {
			panic(stopped{fmt.Errorf("cannot enable %s: %w (%s)", dir, err, str(e))})
		}
	}
}

// must raises what nvmetcli does not catch.
func (r *restorer) must(err error) {
	if err != nil {
		var le *os.LinkError
		if errors.As(err, &le) {
			err = fmt.Errorf("could not symlink %s in configFS: %w", filepath.Base(le.New), le.Err)
		}
		panic(stopped{err})
	}
}
