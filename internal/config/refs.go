package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxFileSize bounds every file Load reads: the configuration and the PEM
// files it names. Nothing legitimate comes close.
const maxFileSize = 16 << 20

// pemPrefix starts a PEM value written inline instead of a path.
const pemPrefix = "-----BEGIN "

// IsInlinePEM reports whether a certificate reference is PEM text rather
// than a path.
func IsInlinePEM(ref string) bool { return strings.HasPrefix(strings.TrimSpace(ref), pemPrefix) }

// readPublic reads a certificate reference: PEM text written inline (how
// partners stored in the database carry their certificates), or a file.
func (p *parser) readPublic(field, ref, what string) ([]byte, error) {
	if IsInlinePEM(ref) {
		return []byte(ref), nil
	}
	if p.inlineOnly && ref != "" {
		return nil, p.fail(field, "not PEM text", "give the certificate as PEM text (the PEM file's content); a path is read only from a file applied with edihub partners apply")
	}
	return p.readRef(field, ref, what)
}

// readSecret reads a secret (field names it, what says what it holds).
// Secrets are never written inline: they stay out of the database. In a
// configuration file's own partners a secret is a path, relative to the
// file; in a profile for the database it is a name in the secrets
// directory (see readSecretRef).
func (p *parser) readSecret(field, ref, what string) ([]byte, error) {
	if IsInlinePEM(ref) {
		return nil, p.fail(field, "holds the key or certificate itself, not a reference",
			"keep secrets in files (a Kubernetes Secret mounted on every replica) and name the file here")
	}
	if p.secretRefs {
		return p.readSecretRef(field, ref, what)
	}
	return p.readRef(field, ref, what)
}

// secretsSetting names the setting of the secrets directory in messages.
const secretsSetting = "EDIHUB_SECRETS_DIR (-secrets-dir)"

// readSecretRef reads the secret ref names in the secrets directory. The
// name is a plain file name; the file is opened through an os.Root, so
// neither the name nor a symbolic link in the directory leads out of it.
// Whatever the operating system says about a file that cannot be read,
// the message is the same and names nothing but ref: who writes a profile
// learns nothing about the replica's files. With secretsOptional a secret
// that cannot be read here is a warning and nil, nil.
func (p *parser) readSecretRef(field, ref, what string) ([]byte, error) {
	if ref == "" {
		return nil, p.fail(field, "missing", "set it to the name of "+what+" in the secrets directory, "+secretsSetting)
	}
	if !secretName(ref) {
		return nil, p.fail(field, fmt.Sprintf("secret reference %q: not a name in the secrets directory", ref),
			"write the name of a file in the secrets directory ("+secretsSetting+", a mounted Kubernetes Secret whose keys are files), like acme-password: letters, digits, '-', '_' and '.', no path; to convert a path, copy the file into the secrets directory and name it here")
	}
	if p.secretsDir == "" {
		if p.secretsOptional {
			p.warn(field, "secret reference %q: no secrets directory here to check it in; each replica reads it from its own, %s", ref, secretsSetting)
			return nil, nil
		}
		return nil, p.fail(field, fmt.Sprintf("secret reference %q: no secrets directory is configured", ref),
			"set "+secretsSetting+" on every replica to the directory the partner secrets are mounted in (a Kubernetes Secret whose keys are files) and put "+ref+" there; or remove the secret from the profile")
	}
	p.files = append(p.files, filepath.Join(p.secretsDir, ref))
	data, err := readInRoot(p.secretsDir, ref)
	if err != nil {
		if p.secretsOptional {
			p.warn(field, "secret reference %q: not found in the secrets directory here; each replica reads it from its own, %s", ref, secretsSetting)
			return nil, nil
		}
		return nil, p.fail(field, fmt.Sprintf("secret reference %q: not found in the secrets directory", ref),
			"put a file named "+ref+" (a key of the mounted Secret), readable by edihub, in the secrets directory of every replica ("+secretsSetting+"), or correct the name")
	}
	return data, nil
}

// secretName reports whether ref is a plain name of a file in the secrets
// directory: the characters of a Kubernetes Secret's keys, not "." or
// "..", and not the "..data" kind of entry Kubernetes keeps beside the
// keys.
func secretName(ref string) bool {
	if ref == "" || len(ref) > 253 || strings.HasPrefix(ref, "..") || ref == "." {
		return false
	}
	for _, c := range ref {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// readInRoot reads at most maxFileSize bytes of the regular file name in
// dir, opened through an os.Root: a name or a symbolic link that leads out
// of dir is an error, as is anything but a regular file (opening a FIFO
// would block).
func readInRoot(dir, name string) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return readRegular(name, root.Stat, root.Open)
}

// refName is how messages name a reference: its path, or "the inline
// PEM" for PEM text.
func refName(ref string) string {
	if IsInlinePEM(ref) {
		return "the inline PEM"
	}
	return ref
}

// readRef reads the file a key names, resolving a relative path against the
// configuration file's directory.
func (p *parser) readRef(field, ref, what string) ([]byte, error) {
	if ref == "" {
		return nil, p.fail(field, "missing", "set it to "+what+"; relative paths are resolved against the config file's directory")
	}
	path := ref
	if !filepath.IsAbs(path) {
		path = filepath.Join(p.dir, ref)
	}
	p.files = append(p.files, path)
	data, err := readFile(path)
	if err != nil {
		fix := "check the path; relative paths are resolved against the config file's directory"
		if !filepath.IsAbs(ref) {
			if abs, aerr := filepath.Abs(p.dir); aerr == nil {
				fix += " (" + abs + ")"
			}
		}
		if errors.Is(err, fs.ErrPermission) {
			fix = "make the file readable by the user edihub runs as"
		}
		return nil, p.failErr(field, err, describeReadError(err, ref), fix)
	}
	return data, nil
}

// readFile reads at most maxFileSize bytes of path. Anything but a regular
// file (after following symbolic links, as Kubernetes Secret mounts use) is
// refused before it is opened: opening a FIFO would block.
func readFile(path string) ([]byte, error) {
	return readRegular(path, os.Stat, os.Open)
}

// readRegular reads at most maxFileSize bytes of the regular file name,
// through stat and open (of the file system or of an os.Root).
func readRegular(name string, stat func(string) (fs.FileInfo, error), open func(string) (*os.File, error)) ([]byte, error) {
	fi, err := stat(name)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errNotRegular}
	}
	f, err := open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileSize {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errTooLarge}
	}
	return data, nil
}

var (
	errNotRegular = errors.New("not a regular file")
	errTooLarge   = fmt.Errorf("larger than %d MiB", maxFileSize>>20)
)

// describeReadError phrases a read error with the path as the user wrote it.
func describeReadError(err error, written string) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		op := pe.Op
		if op == "stat" { // readFile stats before it opens; to the user both are "open"
			op = "open"
		}
		return op + " " + written + ": " + pe.Err.Error()
	}
	return err.Error()
}
