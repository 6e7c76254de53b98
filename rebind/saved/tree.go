package saved

// The whole of nvmetcli's saved config, as boot completion makes it:
// every host, subsystem (namespaces, allowed hosts, attributes) and port
// (attributes, links, ANA groups, referrals), in nvmetcli restore's order
// (nvmetcli/nvmet/nvme.py Root.restore, Subsystem.setup, Port.setup).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Attr is one attribute to write: its file name in the object's
// directory (group_name, as nvmetcli's set_attr makes it) and its value.
type Attr struct {
	File, Value string
}

// Host is hosts/<nqn>.
type Host struct {
	NQN   string
	Attrs []Attr // dhchap_*
}

// Namespace is subsystems/<nqn>/namespaces/<nsid>.
type Namespace struct {
	NSID  uint32
	Attrs []Attr // device_*, resv_* (not enable, not ana_grpid)
	// Enable is the declared enable (nvmetcli writes it after the
	// attributes); ANAGroup the ana_grpid written after it (0: none).
	Enable  bool
	ANAGrp  uint32
	Device  string // device_path, for what enable waits for
	HasPath bool
}

// Subsystem is subsystems/<nqn>.
type Subsystem struct {
	NQN          string
	Namespaces   []Namespace
	AllowedHosts []string
	Attrs        []Attr // attr_*, written last, as nvmetcli does
}

// ANAGroup is ports/<id>/ana_groups/<grpid>.
type ANAGroup struct {
	GrpID uint32
	Attrs []Attr // ana_*
}

// Referral is ports/<id>/referrals/<name>.
type Referral struct {
	Name   string
	Attrs  []Attr // addr_*
	Enable bool
}

// Port is ports/<id>.
type Port struct {
	ID         string
	Attrs      []Attr // addr_*, param_*
	Subsystems []string
	ANAGroups  []ANAGroup
	Referrals  []Referral
}

// Tree is what an nvmetcli file declares. Entries that are malformed or
// hostile are left out (and reported); the rest keeps the file's order.
type Tree struct {
	Source     string
	Hosts      []Host
	Subsystems []Subsystem
	Ports      []Port
	// LIO is what targetcli's saved config declares (nil: none named).
	LIO *LIOTree
}

// Kernel limits the tree is checked against (nvmet: NVMET_MAX_ANAGRPS is
// 128; nvmetcli allows group ids to 1024 and the kernel refuses the rest;
// nsid 0 and 0xffffffff are not namespace ids).
const (
	maxANAGrp = 1024
	maxAttrs  = 64   // attributes of one group
	maxValue  = 4096 // a configfs attribute is at most a page
)

var attrName = regexp.MustCompile(`^[a-z0-9_]{1,48}$`)

// groups decodes the attribute groups of an object, in the order the
// object's type lists them (nvmetcli's attr_groups) and, within a group,
// the file's order. Values are strings, numbers or booleans (written as
// 1/0), never objects; a name is [a-z0-9_]; a value has no newline.
func groups(raw map[string]json.RawMessage, names ...string) ([]Attr, error) {
	var out []Attr
	for _, g := range names {
		r, ok := raw[g]
		if !ok || bytes.Equal(bytes.TrimSpace(r), []byte("null")) {
			continue
		}
		kv, err := orderedObject(r)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", g, err)
		}
		if len(kv) > maxAttrs {
			return nil, fmt.Errorf("%q has %d attributes, over %d", g, len(kv), maxAttrs)
		}
		for _, a := range kv {
			if !attrName.MatchString(a.File) {
				return nil, fmt.Errorf("%q: attribute name %q is not one configfs has", g, a.File)
			}
			v, err := scalar(a.Value)
			if err != nil {
				return nil, fmt.Errorf("%s_%s: %w", g, a.File, err)
			}
			out = append(out, Attr{File: g + "_" + a.File, Value: v})
		}
	}
	return out, nil
}

// orderedObject decodes a JSON object into its members in file order
// (values raw, in Value).
func orderedObject(r json.RawMessage) ([]Attr, error) {
	dec := json.NewDecoder(bytes.NewReader(r))
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("is not an object")
	}
	var out []Attr
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if seen[k] {
			return nil, fmt.Errorf("%q is given twice", k)
		}
		seen[k] = true
		out = append(out, Attr{File: k, Value: string(v)})
	}
	return out, nil
}

// scalar renders a JSON value as an attribute's text.
func scalar(raw string) (string, error) {
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return "", err
	}
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case float64:
		s = strings.TrimSpace(raw)
	case bool:
		s = strconv.Itoa(b2i(x))
	default:
		return "", fmt.Errorf("value %.40s is not a string or a number", raw)
	}
	if len(s) > maxValue {
		return "", fmt.Errorf("value is %d bytes, over a configfs page", len(s))
	}
	if strings.ContainsAny(s, "\n\x00") {
		return "", fmt.Errorf("value %q has a newline or NUL", s)
	}
	return s, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// enable decodes nvmetcli's "enable" (1/0, or a boolean); absent is 0.
func enable(raw json.RawMessage) (bool, error) {
	if raw == nil {
		return false, nil
	}
	s, err := scalar(string(raw))
	if err != nil {
		return false, fmt.Errorf("enable: %w", err)
	}
	switch s {
	case "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, fmt.Errorf("enable %q is not 0 or 1", s)
}

type rawObject = map[string]json.RawMessage

// ParseNvmetcliTree reads every object of nvmetcli's saved config. As
// ParseNvmetcli, a file that is not JSON of nvmetcli's shape is an error,
// and an entry that is malformed or hostile is one of errs (naming the
// file and the entry) and left out with what depends on it (a subsystem's
// namespaces, a port's links); the rest is declared.
func ParseNvmetcliTree(name string, b []byte) (*Tree, []error, error) {
	var f struct {
		Hosts      []json.RawMessage `json:"hosts"`
		Subsystems []json.RawMessage `json:"subsystems"`
		Ports      []json.RawMessage `json:"ports"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("nvmetcli config %s: %w", name, err)
	}
	var errs []error
	bad := func(what string) func(int, error) {
		return func(i int, err error) {
			errs = append(errs, fmt.Errorf("nvmetcli config %s: %s[%d]: %w; it is not completed", name, what, i, err))
		}
	}
	t := &Tree{Source: name,
		Hosts:      entries(f.Hosts, parseHost, func(h Host) string { return "host " + h.NQN }, bad("hosts")),
		Subsystems: entries(f.Subsystems, parseSubsystem, func(s Subsystem) string { return "subsystem " + s.NQN }, bad("subsystems")),
		Ports:      entries(f.Ports, parsePort, func(p Port) string { return "port " + p.ID }, bad("ports")),
	}
	return t, errs, nil
}

// entries decodes a list of one kind of entry, in order: one that does not
// parse, or names (by key) an entry already declared, is reported to bad
// and left out.
func entries[T any](raws []json.RawMessage, parse func(json.RawMessage) (T, error), key func(T) string, bad func(int, error)) []T {
	var out []T
	seen := map[string]bool{}
	for i, raw := range raws {
		v, err := parse(raw)
		if err == nil && seen[key(v)] {
			err = fmt.Errorf("%s is declared again", key(v))
		}
		if err != nil {
			bad(i, err)
			continue
		}
		seen[key(v)] = true
		out = append(out, v)
	}
	return out
}

func parseHost(raw json.RawMessage) (Host, error) {
	var o rawObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return Host{}, err
	}
	var nqn string
	if err := json.Unmarshal(o["nqn"], &nqn); err != nil {
		return Host{}, fmt.Errorf("nqn: %w", err)
	}
	if err := CheckName("host nqn", nqn, maxNQN); err != nil {
		return Host{}, err
	}
	a, err := groups(o, "dhchap")
	if err != nil {
		return Host{}, fmt.Errorf("host %s: %w", nqn, err)
	}
	return Host{NQN: nqn, Attrs: a}, nil
}

func parseSubsystem(raw json.RawMessage) (Subsystem, error) {
	var o rawObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return Subsystem{}, err
	}
	var s Subsystem
	if err := json.Unmarshal(o["nqn"], &s.NQN); err != nil {
		return Subsystem{}, fmt.Errorf("nqn: %w", err)
	}
	if err := CheckName("subsystem nqn", s.NQN, maxNQN); err != nil {
		return Subsystem{}, err
	}
	wrap := func(err error) error { return fmt.Errorf("subsystem %s: %w", s.NQN, err) }
	var nss []json.RawMessage
	if r, ok := o["namespaces"]; ok {
		if err := json.Unmarshal(r, &nss); err != nil {
			return Subsystem{}, wrap(fmt.Errorf("namespaces: %w", err))
		}
	}
	seen := map[uint32]bool{}
	for i, r := range nss {
		ns, err := parseNamespace(r)
		if err == nil && seen[ns.NSID] {
			err = fmt.Errorf("nsid %d is declared again", ns.NSID)
		}
		if err != nil {
			return Subsystem{}, wrap(fmt.Errorf("namespaces[%d]: %w", i, err))
		}
		seen[ns.NSID] = true
		s.Namespaces = append(s.Namespaces, ns)
	}
	if r, ok := o["allowed_hosts"]; ok {
		if err := json.Unmarshal(r, &s.AllowedHosts); err != nil {
			return Subsystem{}, wrap(fmt.Errorf("allowed_hosts: %w", err))
		}
	}
	allowed := map[string]bool{}
	for _, h := range s.AllowedHosts {
		if err := CheckName("allowed host", h, maxNQN); err != nil {
			return Subsystem{}, wrap(err)
		}
		if allowed[h] {
			return Subsystem{}, wrap(fmt.Errorf("allowed host %s is given twice", h))
		}
		allowed[h] = true
	}
	a, err := groups(o, "attr")
	if err != nil {
		return Subsystem{}, wrap(err)
	}
	s.Attrs = a
	return s, nil
}

func parseNamespace(raw json.RawMessage) (Namespace, error) {
	var o rawObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return Namespace{}, err
	}
	var ns Namespace
	id, err := scalar(string(o["nsid"]))
	if err != nil {
		return Namespace{}, fmt.Errorf("nsid: %w", err)
	}
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil || n == 0 || n == 0xffffffff {
		return Namespace{}, fmt.Errorf("nsid %q is not a namespace id (1-4294967294)", id)
	}
	ns.NSID = uint32(n)
	wrap := func(err error) error { return fmt.Errorf("namespace %d: %w", n, err) }
	a, err := groups(o, "device", "resv")
	if err != nil {
		return Namespace{}, wrap(err)
	}
	for _, x := range a {
		if x.File == "device_path" {
			ns.Device, ns.HasPath = x.Value, true
			if x.Value != "" && (!strings.HasPrefix(x.Value, "/") || strings.Contains("/"+x.Value+"/", "/../")) {
				return Namespace{}, wrap(fmt.Errorf("device_path %q is not an absolute path", x.Value))
			}
		}
	}
	ns.Attrs = a
	if ns.Enable, err = enable(o["enable"]); err != nil {
		return Namespace{}, wrap(err)
	}
	// nvmetcli writes "ana_grpid" (and dumps the same in "ana": {"grpid"}).
	if r, ok := o["ana_grpid"]; ok {
		g, err := scalar(string(r))
		if err != nil {
			return Namespace{}, wrap(fmt.Errorf("ana_grpid: %w", err))
		}
		v, err := strconv.ParseUint(g, 10, 32)
		if err != nil || v < 1 || v > maxANAGrp {
			return Namespace{}, wrap(fmt.Errorf("ana_grpid %q is not 1-%d", g, maxANAGrp))
		}
		ns.ANAGrp = uint32(v)
	}
	return ns, nil
}

func parsePort(raw json.RawMessage) (Port, error) {
	var o rawObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return Port{}, err
	}
	id := strings.Trim(string(o["portid"]), `"`)
	if _, err := strconv.ParseUint(id, 10, 16); err != nil {
		return Port{}, fmt.Errorf("portid %q is not a port number (0-65535)", id)
	}
	wrap := func(err error) error { return fmt.Errorf("port %s: %w", id, err) }
	p := Port{ID: id}
	a, err := groups(o, "addr", "param")
	if err != nil {
		return Port{}, wrap(err)
	}
	p.Attrs = a
	if r, ok := o["subsystems"]; ok {
		if err := json.Unmarshal(r, &p.Subsystems); err != nil {
			return Port{}, wrap(fmt.Errorf("subsystems: %w", err))
		}
	}
	linked := map[string]bool{}
	for _, n := range p.Subsystems {
		if err := CheckName("subsystem", n, maxNQN); err != nil {
			return Port{}, wrap(err)
		}
		if linked[n] {
			return Port{}, wrap(fmt.Errorf("subsystem %s is linked twice", n))
		}
		linked[n] = true
	}
	var anas, refs []json.RawMessage
	for _, x := range []struct {
		k string
		v *[]json.RawMessage
	}{{"ana_groups", &anas}, {"referrals", &refs}} {
		if r, ok := o[x.k]; ok && !bytes.Equal(bytes.TrimSpace(r), []byte("null")) {
			if err := json.Unmarshal(r, x.v); err != nil {
				return Port{}, wrap(fmt.Errorf("%s: %w", x.k, err))
			}
		}
	}
	grps := map[uint32]bool{}
	for i, r := range anas {
		var g rawObject
		if err := json.Unmarshal(r, &g); err != nil {
			return Port{}, wrap(fmt.Errorf("ana_groups[%d]: %w", i, err))
		}
		s, err := scalar(string(g["grpid"]))
		v, perr := strconv.ParseUint(s, 10, 32)
		if err != nil || perr != nil || v < 1 || v > maxANAGrp || grps[uint32(v)] {
			return Port{}, wrap(fmt.Errorf("ana_groups[%d]: grpid %q is not a new group id (1-%d)", i, s, maxANAGrp))
		}
		grps[uint32(v)] = true
		ga, err := groups(g, "ana")
		if err != nil {
			return Port{}, wrap(fmt.Errorf("ana group %d: %w", v, err))
		}
		p.ANAGroups = append(p.ANAGroups, ANAGroup{GrpID: uint32(v), Attrs: ga})
	}
	names := map[string]bool{}
	for i, r := range refs {
		var g rawObject
		if err := json.Unmarshal(r, &g); err != nil {
			return Port{}, wrap(fmt.Errorf("referrals[%d]: %w", i, err))
		}
		var rn string
		if err := json.Unmarshal(g["name"], &rn); err != nil {
			return Port{}, wrap(fmt.Errorf("referrals[%d]: name: %w", i, err))
		}
		if err := CheckName("referral", rn, maxName); err != nil || names[rn] {
			if err == nil {
				err = fmt.Errorf("referral %s is declared again", rn)
			}
			return Port{}, wrap(fmt.Errorf("referrals[%d]: %w", i, err))
		}
		names[rn] = true
		ra, err := groups(g, "addr")
		if err != nil {
			return Port{}, wrap(fmt.Errorf("referral %s: %w", rn, err))
		}
		en, err := enable(g["enable"])
		if err != nil {
			return Port{}, wrap(fmt.Errorf("referral %s: %w", rn, err))
		}
		p.Referrals = append(p.Referrals, Referral{Name: rn, Attrs: ra, Enable: en})
	}
	return p, nil
}
