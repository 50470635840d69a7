package postgres

import "io/fs"

// MigrationCount is how many migrations the binary embeds. Versions have
// gaps (numbers are reserved per workstream), so it differs from the
// highest version.
func MigrationCount() int {
	files, err := fs.Glob(migrations(), "*.sql")
	if err != nil {
		panic(err)
	}
	return len(files)
}
