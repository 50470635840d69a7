package outbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.CheckLeaks())) }

// identity is a throwaway RSA key pair with a self-signed certificate.
type identity struct {
	name     string
	key      *rsa.PrivateKey
	cert     *x509.Certificate
	keyPath  string
	certPath string
}

var (
	idOnce sync.Once
	idDir  string
	ids    map[string]*identity
)

// keys returns the identities "station", "partner" and "other", made once
// per test binary.
func keys(t testing.TB) map[string]*identity {
	t.Helper()
	idOnce.Do(func() {
		dir, err := os.MkdirTemp("", "outbox-keys-")
		if err != nil {
			panic(err)
		}
		idDir = dir
		ids = map[string]*identity{}
		for i, name := range []string{"station", "partner", "other"} {
			ids[name] = newIdentity(dir, name, int64(i+1))
		}
	})
	return ids
}

func newIdentity(dir, name string, serial int64) *identity {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "as2-" + name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		panic(err)
	}
	id := &identity{name: name, key: key, cert: cert, keyPath: filepath.Join(dir, name+".key"), certPath: filepath.Join(dir, name+".crt")}
	if err := os.WriteFile(id.keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		panic(err)
	}
	if err := os.WriteFile(id.certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		panic(err)
	}
	return id
}

// partnerYAML is one partner entry: AS2 ID, URL and extra YAML lines.
type partnerYAML struct {
	id, url string
	extra   []string
}

// loadConfig writes a configuration naming the station and partners (all
// with the "partner" certificate) and loads it.
func loadConfig(t testing.TB, partners ...partnerYAML) *config.File {
	t.Helper()
	k := keys(t)
	var b strings.Builder
	fmt.Fprintf(&b, "station: {as2_id: \"EDIHUB TEST\", private_key: %q, certificate: %q, async_mdn_url: \"http://127.0.0.1:1/as2\"}\npartners:\n", k["station"].keyPath, k["station"].certPath)
	for _, p := range partners {
		fmt.Fprintf(&b, "  - as2_id: %q\n    url: %q\n    certificate: %q\n", p.id, p.url, k["partner"].certPath)
		for _, l := range p.extra {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	path := filepath.Join(t.TempDir(), "edihub.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := config.Load(path, config.Options{})
	if err != nil {
		t.Fatalf("config.Load: %v\n%s", err, b.String())
	}
	return f
}

// request is one request the fake partner received.
type request struct {
	header  http.Header
	body    []byte
	chunked bool
	length  int64
}

// partnerServer is a fake AS2 partner on a real listener: it records every
// request and answers with handle.
type partnerServer struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []request
	handle func(n int, r request) (int, http.Header, []byte)
}

func newPartner(t testing.TB, handle func(n int, r request) (int, http.Header, []byte)) *partnerServer {
	t.Helper()
	p := &partnerServer{handle: handle}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rq := request{header: r.Header.Clone(), body: body, chunked: len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked", length: r.ContentLength}
		p.mu.Lock()
		p.reqs = append(p.reqs, rq)
		n := len(p.reqs)
		p.mu.Unlock()
		status, h, b := p.handle(n, rq)
		if status < 0 { // hang until the client gives up
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = w.Write(b)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *partnerServer) requests() []request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]request(nil), p.reqs...)
}

// dispatcherOpts are test defaults: fast polls and backoff, a short lease.
func dispatcherOpts(t testing.TB, st *postgres.Store, cfg *config.File, name string) outbox.Options {
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(client.CloseIdleConnections)
	return outbox.Options{
		Store:           st,
		Listener:        st,
		Config:          cfg,
		Logger:          zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
		Metrics:         outbox.NewMetrics(prometheus.NewRegistry(), st.OutboxStats),
		Identity:        name,
		Client:          client,
		Workers:         4,
		PollInterval:    100 * time.Millisecond,
		BackoffBase:     20 * time.Millisecond,
		BackoffMax:      100 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
	}
}

// startDispatcher runs a dispatcher until the test ends (or stop is
// called) and checks that Run returns nil.
func startDispatcher(t testing.TB, o outbox.Options) (stop func()) {
	t.Helper()
	d, err := outbox.NewDispatcher(o)
	if err != nil {
		t.Fatalf("NewDispatcher: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v, want nil", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func enqueue(t testing.TB, st *postgres.Store, cfg *config.File, partner string, payload []byte, ct, filename string) outbox.Queued {
	t.Helper()
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	m, err := q.Enqueue(context.Background(), outbox.Document{Partner: partner, ContentType: ct, Filename: filename, Payload: payload})
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return m
}

// waitStatus polls until message id has one of the statuses.
func waitStatus(t testing.TB, st *postgres.Store, id int64, want ...string) hub.MessageInfo {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var m hub.MessageInfo
	var err error
	for time.Now().Before(deadline) {
		m, err = st.Message(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if m.Status == w {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("message %d status %q (error %q), want one of %v", id, m.Status, m.Error, want)
	return m
}

// opensslRun runs openssl, failing the test with its stderr.
func opensslRun(t testing.TB, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("openssl", args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("openssl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes()
}

// pendingOutbox counts the outbox rows at url still to be sent or in
// flight, due now or later.
func pendingOutbox(t testing.TB, url string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status = 'pending'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
