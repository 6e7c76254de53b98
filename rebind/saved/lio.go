package saved

// What boot completion makes of targetcli's saved config
// (/etc/target/saveconfig.json, rtslib-fb's RTSRoot.dump): the storage
// objects whose device rtslib's restore skipped ("Could not create
// StorageObject … skipped"), then the LUNs and mapped LUNs that refer to
// them, which its restore failed in turn. Targets, TPGs, portals and ACLs
// are not made: rtslib's restore goes on past a missing disk and makes
// them.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// StorageObject is a backstore: core/<iblock|fileio>_<N>/<name>.
type StorageObject struct {
	Plugin    string // "block" or "fileio"
	Name, Dev string
	WWN       string // T10 unit serial ("" : the kernel's)
	Size      uint64 // fileio on a file
	WriteBack bool   // fileio
	Readonly  bool   // block
	Attrs     []Attr // attrib/<name>, in the file's order
}

// Key is how a LUN names its storage object: plugin/name.
func (s StorageObject) Key() string { return s.Plugin + "/" + s.Name }

// LUN is <fabric>/<wwn>/tpgt_<tag>/lun/lun_<index>, linking a storage object.
type LUN struct {
	Index uint32
	SO    string // plugin/name
	Alias string // the link's name ("": one is made)
}

// MappedLUN is …/acls/<node>/lun_<index>, linking the TPG's lun_<TPGLUN>.
type MappedLUN struct {
	Index, TPGLUN uint32
	WriteProtect  bool
	Alias         string
}

// NodeACL is …/acls/<node>.
type NodeACL struct {
	Node       string
	MappedLUNs []MappedLUN
}

// TPG is target/<fabric>/<wwn>/tpgt_<tag>.
type TPG struct {
	Fabric, WWN string
	Tag         int
	LUNs        []LUN
	ACLs        []NodeACL
}

// Dir is the TPG's directory under the configfs root.
func (t TPG) Dir() string {
	return "target/" + t.Fabric + "/" + t.WWN + "/tpgt_" + strconv.Itoa(t.Tag)
}

// LIOTree is what targetcli's file declares that boot completion makes.
type LIOTree struct {
	Source         string
	StorageObjects []StorageObject
	TPGs           []TPG
}

const maxLUN = 65535

// ParseSaveconfigTree reads the storage objects, LUNs and mapped LUNs of
// targetcli's saved config. A file that is not JSON of that shape is an
// error; a storage object or target that is malformed or hostile is one of
// errs (naming the file and the entry) and left out, with the LUNs of a
// target left out.
func ParseSaveconfigTree(name string, b []byte) (*LIOTree, []error, error) {
	var f struct {
		StorageObjects []json.RawMessage `json:"storage_objects"`
		Targets        []json.RawMessage `json:"targets"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("targetcli config %s: %w", name, err)
	}
	var errs []error
	bad := func(what string) func(int, error) {
		return func(i int, err error) {
			errs = append(errs, fmt.Errorf("targetcli config %s: %s[%d]: %w; it is not completed", name, what, i, err))
		}
	}
	t := &LIOTree{Source: name,
		StorageObjects: entries(f.StorageObjects, parseStorageObject, func(s StorageObject) string { return "storage object " + s.Key() }, bad("storage_objects")),
	}
	for _, tg := range entries(f.Targets, parseTarget, func(t target) string { return "target " + t.fabric + "/" + t.wwn }, bad("targets")) {
		t.TPGs = append(t.TPGs, tg.tpgs...)
	}
	return t, errs, nil
}

func parseStorageObject(raw json.RawMessage) (StorageObject, error) {
	var o rawObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return StorageObject{}, err
	}
	var s StorageObject
	for k, v := range map[string]*string{"plugin": &s.Plugin, "name": &s.Name} {
		if err := json.Unmarshal(o[k], v); err != nil {
			return StorageObject{}, fmt.Errorf("%s: %w", k, err)
		}
	}
	if err := CheckName("storage object name", s.Name, maxName); err != nil {
		return StorageObject{}, err
	}
	if strings.ContainsAny(s.Name, " \t") {
		return StorageObject{}, fmt.Errorf("storage object name %q contains a space", s.Name)
	}
	if s.Plugin != "block" && s.Plugin != "fileio" {
		return s, nil // ramdisk, pscsi, user: not completed (no late device to wait for, or not ours)
	}
	wrap := func(err error) error { return fmt.Errorf("storage object %s: %w", s.Key(), err) }
	if r, ok := o["dev"]; ok {
		if err := json.Unmarshal(r, &s.Dev); err != nil {
			return StorageObject{}, wrap(fmt.Errorf("dev: %w", err))
		}
	}
	if !strings.HasPrefix(s.Dev, "/") || strings.Contains("/"+s.Dev+"/", "/../") || strings.ContainsAny(s.Dev, ",\n") {
		return StorageObject{}, wrap(fmt.Errorf("dev %q is not an absolute path", s.Dev))
	}
	if r, ok := o["wwn"]; ok && string(r) != "null" {
		if err := json.Unmarshal(r, &s.WWN); err != nil || strings.ContainsAny(s.WWN, "\n,") || len(s.WWN) > 256 {
			return StorageObject{}, wrap(fmt.Errorf("wwn %s is not a unit serial", r))
		}
	}
	for k, v := range map[string]*bool{"write_back": &s.WriteBack, "readonly": &s.Readonly} {
		if r, ok := o[k]; ok && string(r) != "null" {
			if err := json.Unmarshal(r, v); err != nil {
				return StorageObject{}, wrap(fmt.Errorf("%s: %w", k, err))
			}
		}
	}
	if r, ok := o["size"]; ok && string(r) != "null" {
		if err := json.Unmarshal(r, &s.Size); err != nil {
			return StorageObject{}, wrap(fmt.Errorf("size: %w", err))
		}
	}
	if r, ok := o["attributes"]; ok && string(r) != "null" {
		kv, err := orderedObject(r)
		if err != nil {
			return StorageObject{}, wrap(fmt.Errorf("attributes: %w", err))
		}
		for _, a := range kv {
			if !attrName.MatchString(a.File) {
				return StorageObject{}, wrap(fmt.Errorf("attribute name %q is not one configfs has", a.File))
			}
			v, err := scalar(a.Value)
			if err != nil {
				return StorageObject{}, wrap(fmt.Errorf("attribute %s: %w", a.File, err))
			}
			s.Attrs = append(s.Attrs, Attr{File: a.File, Value: v})
		}
	}
	return s, nil
}

// target is one target of the file.
type target struct {
	fabric, wwn string
	tpgs        []TPG
}

// parseTarget reads one target's TPGs with their LUNs and mapped LUNs.
func parseTarget(raw json.RawMessage) (target, error) {
	var t struct {
		Fabric string `json:"fabric"`
		WWN    string `json:"wwn"`
		TPGs   []struct {
			Tag  int `json:"tag"`
			LUNs []struct {
				Index         *uint32 `json:"index"`
				StorageObject string  `json:"storage_object"`
				Alias         string  `json:"alias"`
			} `json:"luns"`
			ACLs []struct {
				Node       string `json:"node_wwn"`
				MappedLUNs []struct {
					Index        *uint32 `json:"index"`
					TPGLUN       *uint32 `json:"tpg_lun"`
					WriteProtect bool    `json:"write_protect"`
					Alias        string  `json:"alias"`
				} `json:"mapped_luns"`
			} `json:"node_acls"`
		} `json:"tpgs"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return target{}, err
	}
	if err := CheckName("fabric", t.Fabric, maxName); err != nil {
		return target{}, err
	}
	if err := CheckName("wwn", t.WWN, maxName); err != nil {
		return target{}, err
	}
	alias := func(a string) error {
		if a == "" {
			return nil
		}
		return CheckName("alias", a, maxName)
	}
	var out []TPG
	tags := map[int]bool{}
	for _, g := range t.TPGs {
		if g.Tag < 1 || g.Tag > 65535 || tags[g.Tag] {
			return target{}, fmt.Errorf("target %s: tpg tag %d is not a new 1-65535", t.WWN, g.Tag)
		}
		tags[g.Tag] = true
		tpg := TPG{Fabric: t.Fabric, WWN: t.WWN, Tag: g.Tag}
		wrap := func(err error) error { return fmt.Errorf("target %s tpg %d: %w", t.WWN, g.Tag, err) }
		luns := map[uint32]bool{}
		for _, l := range g.LUNs {
			p := strings.Split(l.StorageObject, "/")
			if l.Index == nil || *l.Index > maxLUN || luns[*l.Index] {
				return target{}, wrap(fmt.Errorf("a LUN index is missing, over %d or given twice", maxLUN))
			}
			if len(p) != 4 || p[0] != "" || p[1] != "backstores" || CheckName("storage object", p[3], maxName) != nil || CheckName("backstore", p[2], maxName) != nil {
				return target{}, wrap(fmt.Errorf("lun %d: storage_object %q is not /backstores/<plugin>/<name>", *l.Index, l.StorageObject))
			}
			if err := alias(l.Alias); err != nil {
				return target{}, wrap(fmt.Errorf("lun %d: %w", *l.Index, err))
			}
			luns[*l.Index] = true
			tpg.LUNs = append(tpg.LUNs, LUN{Index: *l.Index, SO: p[2] + "/" + p[3], Alias: l.Alias})
		}
		nodes := map[string]bool{}
		for _, a := range g.ACLs {
			if err := CheckName("node_wwn", a.Node, maxName); err != nil || nodes[a.Node] {
				if err == nil {
					err = fmt.Errorf("node_wwn %s is given twice", a.Node)
				}
				return target{}, wrap(err)
			}
			nodes[a.Node] = true
			acl := NodeACL{Node: a.Node}
			idx := map[uint32]bool{}
			for _, m := range a.MappedLUNs {
				if m.Index == nil || m.TPGLUN == nil || *m.Index > maxLUN || idx[*m.Index] {
					return target{}, wrap(fmt.Errorf("acl %s: a mapped LUN's index or tpg_lun is missing, over %d or given twice", a.Node, maxLUN))
				}
				if err := alias(m.Alias); err != nil {
					return target{}, wrap(fmt.Errorf("acl %s mapped lun %d: %w", a.Node, *m.Index, err))
				}
				idx[*m.Index] = true
				acl.MappedLUNs = append(acl.MappedLUNs, MappedLUN{Index: *m.Index, TPGLUN: *m.TPGLUN, WriteProtect: m.WriteProtect, Alias: m.Alias})
			}
			tpg.ACLs = append(tpg.ACLs, acl)
		}
		out = append(out, tpg)
	}
	return target{fabric: t.Fabric, wwn: t.WWN, tpgs: out}, nil
}
