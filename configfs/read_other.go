//go:build !linux

package configfs

func readSmall(path string, max int) ([]byte, error) { return readSmallGeneric(path, max) }
