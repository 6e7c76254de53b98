package configfs

import "testing"

// readdir's order of nvmet/ (default groups made subsystems, ports, hosts)
// tells the kernel's list discipline: 6.1 and 6.12 list hosts first
// (newest first), 6.18 and 7.3 subsystems first (creation order).
func TestNewestFirstFrom(t *testing.T) {
	for _, tt := range []struct {
		names       []string
		v, known    bool
		description string
	}{
		{[]string{"hosts", "ports", "subsystems"}, true, true, "6.1, 6.12"},
		{[]string{"subsystems", "ports", "hosts"}, false, true, "6.18, 7.3"},
		{[]string{"ports", "subsystems"}, true, false, "a test tree without hosts"},
		{nil, true, false, "nvmet not loaded"},
	} {
		if v, known := newestFirstFrom(tt.names); v != tt.v || known != tt.known {
			t.Errorf("%s %v: newest first %v known %v, want %v %v", tt.description, tt.names, v, known, tt.v, tt.known)
		}
	}
}
