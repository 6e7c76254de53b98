package configfs

// OSOpsWalk is OSOps{Root: root} resolving its writes as on a kernel
// without openat2 (before Linux 5.6, or openat2 refused by seccomp).
func OSOpsWalk(root string) OSOps { return OSOps{Root: root, walk: true} }
