//go:build !faultinject

package main

// faultHook is nil in normal builds: no fault points.
func faultHook() func(string) bool { return nil }
