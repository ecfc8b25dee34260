//go:build !linux

package privilege

import "errors"

// Effective is only implemented on Linux.
func Effective() (Set, error) {
	return 0, errors.New("capabilities are a Linux feature")
}
