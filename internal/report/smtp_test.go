package report_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// smtpServer is a real SMTP server for the tests (go-smtp): STARTTLS (or
// implicit TLS) with a certificate the client trusts through roots, PLAIN
// authentication, and every accepted message kept.
type smtpServer struct {
	t        *testing.T
	addr     string
	roots    *x509.CertPool
	user     string
	password string

	mu   sync.Mutex
	msgs []received
	// dropAfterData is how many of the next sessions drop the connection
	// right after the server accepted their message: the client's RSET
	// and QUIT fail although the mail was taken.
	dropAfterData int
	srv           *smtp.Server
	ln            net.Listener
	tls           *tls.Config
	// reserved holds a down server's port (bound, not listening: a
	// connection is refused, and no other test's server takes the port)
	// until up; 0 or -1 when none.
	reserved int
}

type received struct {
	from string
	to   []string
	data []byte
}

// newSMTPServer starts a server on a free port (STARTTLS unless implicit).
func newSMTPServer(t *testing.T, implicit bool) *smtpServer {
	t.Helper()
	s := &smtpServer{t: t, user: "reports", password: "s3cret-smtp-password"}
	s.tls, s.roots = testTLS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	if implicit {
		ln = tls.NewListener(ln, s.tls)
	}
	s.serve(ln)
	return s
}

// newDownSMTPServer reserves an address where nothing listens until up.
func newDownSMTPServer(t *testing.T) *smtpServer {
	t.Helper()
	s := &smtpServer{t: t, user: "reports", password: "s3cret-smtp-password"}
	s.tls, s.roots = testTLS(t)
	// A socket bound and not listening: connecting is refused, as to a
	// server that is down, and the port stays this test's (a listener
	// closed at once would free it for any other test's server, whose
	// answer is not a refused connection). SO_REUSEADDR on both lets up
	// listen on it while it is bound.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	s.reserved = fd
	t.Cleanup(s.release)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	return s
}

// release closes the reserved socket, if any.
func (s *smtpServer) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reserved > 0 {
		_ = syscall.Close(s.reserved)
		s.reserved = -1
	}
}

// up starts serving on the reserved address.
func (s *smtpServer) up() {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.release()
	s.serve(ln)
}

func (s *smtpServer) serve(ln net.Listener) {
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) { return &smtpSession{s: s, conn: c}, nil }))
	srv.Domain = "localhost"
	srv.TLSConfig = s.tls
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	srv.MaxMessageBytes = 10 << 20
	s.mu.Lock()
	s.srv, s.ln = srv, ln
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	s.t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
}

func (s *smtpServer) port() string {
	_, p, _ := net.SplitHostPort(s.addr)
	return p
}

// url is the EDIHUB_SMTP_URL of the server.
func (s *smtpServer) url(scheme string) string {
	return scheme + "://" + s.user + "@127.0.0.1:" + s.port()
}

func (s *smtpServer) messages() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.msgs...)
}

type smtpSession struct {
	s      *smtpServer
	conn   *smtp.Conn
	authed bool
	cur    received
	// drop: close the connection at the reset that follows the accepted
	// DATA (go-smtp resets after writing the 250 reply).
	drop bool
}

func (x *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (x *smtpSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != x.s.user || pass != x.s.password {
			return errors.New("invalid credentials")
		}
		x.authed = true
		return nil
	}), nil
}

func (x *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	if !x.authed {
		return smtp.ErrAuthRequired
	}
	x.cur = received{from: from}
	return nil
}

func (x *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	x.cur.to = append(x.cur.to, to)
	return nil
}

func (x *smtpSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	x.cur.data = b
	x.s.mu.Lock()
	x.s.msgs = append(x.s.msgs, x.cur)
	if x.s.dropAfterData > 0 {
		x.s.dropAfterData--
		x.drop = true
	}
	x.s.mu.Unlock()
	return nil
}

func (x *smtpSession) Reset() {
	x.cur = received{}
	if x.drop {
		x.drop = false
		_ = x.conn.Conn().Close()
	}
}

func (x *smtpSession) Logout() error { return nil }

// testTLS makes a self-signed certificate for 127.0.0.1 and the pool that
// trusts it.
func testTLS(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "smtp test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}, pool
}

// clientTLS is the TLS configuration the mailer trusts the server with.
func (s *smtpServer) clientTLS() *tls.Config {
	return &tls.Config{RootCAs: s.roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}
