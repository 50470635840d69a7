package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// adminName is the first admin the stack makes.
const adminName = "admin"

// ensureAdmin makes sure the hub's database (dbURL) has the user admin,
// an admin, whose password is in state/admin-password (generated once, like
// the API token): it adds the user when it is missing, and sets its
// password to the file's when the file is new (the database outlived an
// earlier file). It returns the password, for the start-up listing.
func ensureAdmin(ctx context.Context, binary, state, dbURL string) (string, error) {
	path := filepath.Join(state, "admin-password")
	password, created, err := ensureSecret(path)
	if err != nil {
		return "", err
	}
	users := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, binary, append([]string{"users"}, args...)...)
		cmd.Env = append(os.Environ(), "EDIHUB_DATABASE_URL="+dbURL)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := users("add", adminName, "-role", "admin", "-password-file", path)
	switch {
	case err == nil:
		say("added the admin user %q", adminName)
		return password, nil
	case !strings.Contains(out, "a user of that name exists"):
		return "", fmt.Errorf("edihub users add %s:\n%s\n%w", adminName, out, err)
	case created:
		if out, err := users("passwd", adminName, "-password-file", path); err != nil {
			return "", fmt.Errorf("edihub users passwd %s:\n%s\n%w", adminName, out, err)
		}
		say("set the password of the admin user %q to the new %s", adminName, path)
	}
	return password, nil
}

// ensureSecret reads the secret in path, or writes a new random one there
// (created is then true).
func ensureSecret(path string) (secret string, created bool, err error) {
	if b, err := os.ReadFile(path); err == nil {
		s := strings.TrimSpace(string(b))
		if s == "" {
			return "", false, errors.New(path + " is empty: delete it to have a new one generated")
		}
		return s, false, nil
	}
	s := rand.Text()
	return s, true, os.WriteFile(path, []byte(s+"\n"), 0o600)
}
