package chaos

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Post is one AS2 POST that crossed a front door: who sent it, what it
// carried and how it was answered.
type Post struct {
	At        time.Time // when the request arrived
	Took      time.Duration
	MessageID string // the Message-ID header, for a document
	MDN       bool   // an asynchronous MDN, not a document
	Status    int    // the answer's status; 0 when none reached the sender
}

// OK reports whether the sender got a 2xx.
func (p Post) OK() bool { return p.Status >= 200 && p.Status < 300 }

// front is a recording HTTP front door: it passes every request to next
// and records each POST /as2 and its answer.
type front struct {
	srv  *http.Server
	ln   net.Listener
	next http.Handler
	done chan struct{}

	mu    sync.Mutex
	posts []Post
}

func startFront(next http.Handler) (*front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &front{ln: ln, next: next, done: make(chan struct{})}
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(f.done)
		_ = f.srv.Serve(ln)
	}()
	return f, nil
}

// URL is the front's AS2 URL.
func (f *front) URL() string { return "http://" + f.ln.Addr().String() + "/as2" }

// Close stops the front, cutting requests in flight.
func (f *front) Close() error {
	err := f.srv.Close()
	<-f.done
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Posts returns every POST so far, in the order they were answered.
func (f *front) Posts() []Post {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Post(nil), f.posts...)
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		f.next.ServeHTTP(w, r)
		return
	}
	p := Post{At: time.Now(), MessageID: r.Header.Get("Message-Id")}
	// Documents are encrypted (application/pkcs7-mime); MDNs are
	// multipart/report, signed or not.
	p.MDN = strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "multipart/")
	sw := &statusWriter{ResponseWriter: w}
	f.next.ServeHTTP(sw, r)
	p.Took = time.Since(p.At)
	if r.Context().Err() == nil {
		p.Status = sw.status
		if p.Status == 0 {
			p.Status = http.StatusOK
		}
	}
	f.mu.Lock()
	f.posts = append(f.posts, p)
	f.mu.Unlock()
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}
