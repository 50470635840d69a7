package s3server

import (
	"fmt"

	"github.com/edihub/edihub/internal/testenv/exittemp"
)

// StartTemp is Start in a new temporary directory that is removed when
// this process ends: for a server shared by a package's tests, which has
// no test to clean up after it.
func StartTemp() (*Server, error) {
	dir, err := exittemp.Dir("edihub-s3server-")
	if err != nil {
		return nil, fmt.Errorf("s3server: %w", err)
	}
	return Start(dir)
}
