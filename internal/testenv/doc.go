// Package testenv is the wing of helpers that start real parts for tests
// and for the local development stack, in the spirit of net/http/httptest
// and client-go's testing/: its packages are imported by _test.go files
// and by test/ only, never by a product package (TestOnlyTestsImportTheWing
// checks it).
//
//   - pgserver: a private PostgreSQL from the machine's server binaries
//   - pgtest: a fresh migrated database per test, on one server per package
//   - pgfill: a database filled like a hub's (a million messages) and the
//     ops console's queries over it
//   - devpki: development and test keys and self-signed certificates
//   - freeport: loopback ports never handed out twice in one process
//   - openssltest: openssl as the independent AS2 peer
//   - peakrss: the test process's peak resident memory, reset before the
//     work measured
//   - browser: a shared headless Chromium, a tab per test, and the checks
//     a console page must pass (accessibility, keyboard, console errors)
//   - exittemp: temporary directories removed when the process that made
//     them ends (for servers a package's tests share)
//   - s3server: Versity's S3 gateway with its POSIX backend on loopback
//   - sshserver: a private OpenSSH sshd serving SFTP on loopback, with
//     generated host and user keys
//   - oidcprovider: a real OpenID Connect provider (zitadel/oidc's op) with
//     a login page, for sign-in tests
package testenv
