//go:build faultinject

package main

import (
	"fmt"
	"os"
	"strings"
)

// faultHook, in test builds only (-tags faultinject), kills the process
// without any cleanup at the point named by NVMET_REBIND_FAULT
// ("crash-after-unlink" = after the first unlink of a rebind, or
// "crash-<point>" for any engine point such as crash-after-iser-0).
func faultHook() func(string) bool {
	v := os.Getenv("NVMET_REBIND_FAULT")
	if v == "" {
		return nil
	}
	want := strings.TrimPrefix(v, "crash-")
	if want == "after-unlink" {
		want = "after-unlink-0"
	}
	return func(point string) bool {
		if point == want {
			fmt.Fprintf(os.Stderr, "nvmet-rebind: fault injection: crashing at %s\n", point)
			os.Exit(137)
		}
		return false
	}
}
