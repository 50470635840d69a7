package chaos

import (
	"io"
	"net"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
)

// mailSink is a real SMTP server (go-smtp) on a fixed loopback address,
// without TLS or authentication (the report's smtp://host:port?tls=none),
// that keeps every mail; Down and Up take it off the network and back, as
// an outage of the company's mail server would.
type mailSink struct {
	addr string

	mu    sync.Mutex
	mails []sentMail
	srv   *smtp.Server
	done  chan struct{}
}

type sentMail struct {
	At   time.Time
	Data []byte
}

func startMailSink() (*mailSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &mailSink{addr: ln.Addr().String()}
	m.serve(ln)
	return m, nil
}

// URL is the EDIHUB_SMTP_URL of the sink.
func (m *mailSink) URL() string { return "smtp://" + m.addr + "?tls=none" }

func (m *mailSink) serve(ln net.Listener) {
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &sinkSession{m: m}, nil }))
	srv.Domain = "localhost"
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	srv.MaxMessageBytes = 10 << 20
	done := make(chan struct{})
	m.mu.Lock()
	m.srv, m.done = srv, done
	m.mu.Unlock()
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
}

// Down stops the server: connections are refused until Up.
func (m *mailSink) Down() {
	m.mu.Lock()
	srv, done := m.srv, m.done
	m.srv = nil
	m.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
		<-done
	}
}

// Up serves again on the same address.
func (m *mailSink) Up() error {
	m.mu.Lock()
	up := m.srv != nil
	m.mu.Unlock()
	if up {
		return nil
	}
	ln, err := net.Listen("tcp", m.addr)
	if err != nil {
		return err
	}
	m.serve(ln)
	return nil
}

// Close stops the server.
func (m *mailSink) Close() { m.Down() }

// Mails returns every mail accepted so far.
func (m *mailSink) Mails() []sentMail {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]sentMail(nil), m.mails...)
}

type sinkSession struct{ m *mailSink }

func (s *sinkSession) Mail(string, *smtp.MailOptions) error { return nil }
func (s *sinkSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (s *sinkSession) Reset()                               {}
func (s *sinkSession) Logout() error                        { return nil }

func (s *sinkSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.m.mu.Lock()
	s.m.mails = append(s.m.mails, sentMail{At: time.Now(), Data: b})
	s.m.mu.Unlock()
	return nil
}
