// Package controlplane starts a real Kubernetes control plane, etcd and
// kube-apiserver on loopback, for edihub's tests: token authentication, RBAC
// on, and the RBAC of deploy/k8s/rbac.yaml applied in a fresh namespace.
//
// The binaries come from the separate Go module test/k8s, built by
// scripts/controlplane-build.sh (make controlplane) into
// .cache/controlplane/bin. Start fails, never skips, when they are missing.
//
// Every child process runs in its own process group with SIGKILL as its
// parent-death signal, so none outlives the test process, and Close stops
// and reaps them all.
package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/edihub/edihub/internal/testenv/freeport"
)

const (
	// AdminUser is the user of the admin token, in group system:masters.
	AdminUser = "admin"
	// EdihubUser is the user of the edihub token. It is in no privileged
	// group; it may do what the Role of deploy/k8s/rbac.yaml allows in
	// the control plane's namespace, and nothing else.
	EdihubUser = "edihub"
	// DefaultNamespace is the namespace Start creates when Options.Namespace
	// is empty.
	DefaultNamespace = "edihub"
	// BinDirEnv names the environment variable that overrides the default
	// binary directory.
	BinDirEnv = "EDIHUB_CONTROLPLANE_BIN"

	mainModule = "github.com/edihub/edihub"
	buildHint  = "run scripts/controlplane-build.sh (or make controlplane) from the repository root"

	// startTimeout bounds each wait for a component to become ready, on
	// top of the caller's context.
	startTimeout = 2 * time.Minute
	// stopGrace is how long a component may take to shut down on SIGTERM
	// before it is killed.
	stopGrace = 10 * time.Second
	// portAttempts bounds the retries when a chosen port was taken.
	portAttempts = 3
)

// Options configures Start. The zero value is ready to use.
type Options struct {
	// BinDir holds the kube-apiserver and etcd binaries. Default:
	// $EDIHUB_CONTROLPLANE_BIN, else <repository root>/.cache/controlplane/bin.
	BinDir string
	// RBACFile is the manifest whose ServiceAccount, Role and RoleBinding
	// are applied. Default: <repository root>/deploy/k8s/rbac.yaml.
	RBACFile string
	// Namespace is created and receives the RBAC. Default: DefaultNamespace.
	Namespace string
	// Logf, if set, receives progress messages (never tokens or keys).
	Logf func(format string, args ...any)
	// APIServerArgs are added to kube-apiserver's flags, e.g.
	// --feature-gates=... for a test of a feature that is off by default.
	APIServerArgs []string
	// KeepData makes Start reuse the etcd data a previous Start left in
	// its directory instead of beginning with an empty etcd: every object
	// (a Lease too) survives, and resourceVersions, which are etcd
	// revisions, go on rising across restarts as a long-lived cluster's
	// do. The namespace and the RBAC are applied again, created or
	// replaced. Default: the data is deleted first.
	KeepData bool
}

// ControlPlane is a running etcd and kube-apiserver. Its methods are safe
// for concurrent use; StopAPIServer, StartAPIServer and Close serialise.
type ControlPlane struct {
	// URL is the API server's address, https://127.0.0.1:<port>. It stays
	// the same across StopAPIServer and StartAPIServer.
	URL string
	// CAData is the PEM certificate of the CA that signed the serving
	// certificate.
	CAData []byte
	// AdminKubeconfig and EdihubKubeconfig are kubeconfig files for
	// AdminUser and EdihubUser; the edihub one defaults to Namespace.
	AdminKubeconfig, EdihubKubeconfig string
	// Namespace holds the RBAC of deploy/k8s/rbac.yaml.
	Namespace string
	// EtcdURL is etcd's client URL.
	EtcdURL string
	// Dir holds the data, keys, kubeconfigs and logs.
	Dir string
	// APIServerLog and EtcdLog are the processes' output; the API server
	// appends across restarts.
	APIServerLog, EtcdLog string

	logf          func(string, ...any)
	keepData      bool
	apiserverBin  string
	apiserverArgs []string
	extraArgs     []string
	pki           *pki

	mu        sync.Mutex
	etcd      *process
	apiserver *process
	closed    bool
}

// StartForTest starts a control plane in tb.TempDir() and closes it when the
// test ends; it fails the test if the control plane cannot start. A nil
// opts.Logf logs through tb.Logf.
func StartForTest(tb testing.TB, opts Options) *ControlPlane {
	tb.Helper()
	if opts.Logf == nil {
		opts.Logf = tb.Logf
	}
	cp, err := Start(tb.Context(), tb.TempDir(), opts)
	if err != nil {
		tb.Fatalf("start control plane: %v", err)
	}
	tb.Cleanup(func() {
		if err := cp.Close(); err != nil {
			tb.Errorf("close control plane: %v", err)
		}
	})
	return cp
}

// Start starts etcd and kube-apiserver on free loopback ports with their data
// under dir (created when missing; etcd's data of an earlier Start there is
// deleted unless opts.KeepData), waits until the API server is ready,
// writes the two kubeconfig files into dir, creates the namespace and
// applies the RBAC.
//
// ctx bounds only the start; the processes run until Close. On error nothing
// started is left running, and the error carries the tail of the failing
// process's log.
func Start(ctx context.Context, dir string, opts Options) (_ *ControlPlane, err error) {
	began := time.Now()
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// Start owns its directory: it creates it (and the logs in it) before
	// anything is started, whatever the caller did.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	binDir, rbacFile, err := resolvePaths(opts)
	if err != nil {
		return nil, err
	}
	etcdBin, err := findBinary(binDir, "etcd")
	if err != nil {
		return nil, err
	}
	apiserverBin, err := findBinary(binDir, "kube-apiserver")
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(rbacFile); err != nil {
		return nil, fmt.Errorf("controlplane: RBAC manifest: %w", err)
	}
	ns := opts.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}

	c := &ControlPlane{
		AdminKubeconfig:  filepath.Join(dir, "admin.kubeconfig"),
		EdihubKubeconfig: filepath.Join(dir, "edihub.kubeconfig"),
		Namespace:        ns,
		Dir:              dir,
		APIServerLog:     filepath.Join(dir, "kube-apiserver.log"),
		EtcdLog:          filepath.Join(dir, "etcd.log"),
		logf:             logf,
		keepData:         opts.KeepData,
		apiserverBin:     apiserverBin,
		extraArgs:        opts.APIServerArgs,
	}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()

	// Generate the keys while etcd starts.
	type keys struct {
		pki *pki
		err error
	}
	keysc := make(chan keys, 1)
	go func() {
		p, err := newPKI(filepath.Join(dir, "pki"))
		keysc <- keys{p, err}
	}()
	err = c.startEtcd(ctx, etcdBin)
	k := <-keysc
	if err != nil {
		return nil, err
	}
	if k.err != nil {
		return nil, fmt.Errorf("controlplane: keys: %w", k.err)
	}
	c.pki, c.CAData = k.pki, k.pki.caPEM
	logf("controlplane: etcd ready at %s after %v", c.EtcdURL, time.Since(began).Round(time.Millisecond))

	for attempt := 1; ; attempt++ {
		ports, err := pickPorts(1)
		if err != nil {
			return nil, fmt.Errorf("controlplane: %w", err)
		}
		c.URL = "https://127.0.0.1:" + strconv.Itoa(ports[0])
		c.apiserverArgs = c.apiserverFlags(ports[0])
		err = c.startAPIServer(ctx)
		if err == nil {
			break
		}
		if attempt < portAttempts && errors.Is(err, errPortTaken) {
			logf("controlplane: kube-apiserver: port %d was taken; trying another", ports[0])
			continue
		}
		return nil, err
	}

	if err := c.writeKubeconfig(c.AdminKubeconfig, AdminUser, c.pki.adminToken, "default"); err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	if err := c.writeKubeconfig(c.EdihubKubeconfig, EdihubUser, c.pki.edihubToken, ns); err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}

	cs, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	_, err = cs.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) && opts.KeepData {
		err = nil // made by an earlier Start on this data
	}
	if err != nil {
		return nil, fmt.Errorf("controlplane: create namespace %s: %w", ns, err)
	}
	role, err := applyRBAC(ctx, cs, rbacFile, ns)
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	edihub, err := kubernetes.NewForConfig(c.EdihubConfig())
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	if err := waitAuthorized(ctx, edihub, role, ns); err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	logf("controlplane: ready at %s, namespace %s, after %v", c.URL, ns, time.Since(began).Round(time.Millisecond))
	return c, nil
}

// startEtcd starts etcd on free ports and waits until it is healthy. When
// another process took a chosen port first, it tries new ones.
func (c *ControlPlane) startEtcd(ctx context.Context, bin string) error {
	for attempt := 1; ; attempt++ {
		ports, err := pickPorts(2)
		if err != nil {
			return fmt.Errorf("controlplane: %w", err)
		}
		c.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		dataDir := filepath.Join(c.Dir, "etcd")
		if !c.keepData {
			// Left by an earlier Start or a failed attempt.
			if err := os.RemoveAll(dataDir); err != nil {
				return fmt.Errorf("controlplane: %w", err)
			}
		}
		// With data kept, etcd restarts its one member from the data
		// directory and ignores the --initial-* flags; the member's
		// peer address may change, as nothing connects to it.
		p, err := startProcess("etcd", bin, []string{
			"--name=default",
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + c.EtcdURL,
			"--advertise-client-urls=" + c.EtcdURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=default=" + peerURL,
			"--initial-cluster-state=new",
			// A single member on loopback: elect itself at once, and
			// skip fsync, which tests do not need and which is slow.
			"--heartbeat-interval=10",
			"--election-timeout=100",
			"--unsafe-no-fsync",
			"--log-level=warn",
		}, c.EtcdLog)
		if err != nil {
			return fmt.Errorf("controlplane: %w", err)
		}
		c.etcd = p
		err = waitHealthy(ctx, p, c.EtcdURL+"/health", http.DefaultTransport, "")
		if err == nil {
			return nil
		}
		_ = p.stop(stopGrace)
		c.etcd = nil
		err = markPortTaken(p, err)
		if attempt < portAttempts && errors.Is(err, errPortTaken) {
			c.logf("controlplane: etcd: port %d or %d was taken; trying others", ports[0], ports[1])
			continue
		}
		return fmt.Errorf("controlplane: etcd: %w", err)
	}
}

// apiserverFlags returns the flags of kube-apiserver serving on port.
func (c *ControlPlane) apiserverFlags(port int) []string {
	return append([]string{
		"--etcd-servers=" + c.EtcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(c.Dir, "pki"),
		"--tls-cert-file=" + c.pki.servingCert,
		"--tls-private-key-file=" + c.pki.servingKey,
		"--token-auth-file=" + c.pki.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=" + c.pki.serviceAccount,
		"--service-account-key-file=" + c.pki.saKey,
		"--service-account-signing-key-file=" + c.pki.saKey,
		"--api-audiences=" + c.pki.serviceAccount,
		"--service-cluster-ip-range=10.0.0.0/24",
		// No controller-manager creates the default ServiceAccounts.
		"--disable-admission-plugins=ServiceAccount",
		// Fewer moving parts and a faster start; edihub does not rely on
		// API priority and fairness.
		"--enable-priority-and-fairness=false",
		// A loopback advertise address must not become the endpoints of
		// the kubernetes Service (upstream's test server does the same).
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}, c.extraArgs...)
}

// errPortTaken marks a start that failed because a chosen port was taken
// between choosing it and the child binding it.
var errPortTaken = errors.New("port taken by another process")

// markPortTaken wraps err with errPortTaken when the exited process p logged
// that its address was in use.
func markPortTaken(p *process, err error) error {
	if p.exited() && strings.Contains(p.logTail(), "address already in use") {
		return fmt.Errorf("%w: %w", errPortTaken, err)
	}
	return err
}

// AdminConfig returns a new client configuration for AdminUser.
func (c *ControlPlane) AdminConfig() *rest.Config {
	return c.restConfig(c.pki.adminToken)
}

// EdihubConfig returns a new client configuration for EdihubUser.
func (c *ControlPlane) EdihubConfig() *rest.Config {
	return c.restConfig(c.pki.edihubToken)
}

func (c *ControlPlane) restConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), c.CAData...)},
		QPS:             100,
		Burst:           200,
	}
}

// PIDs returns the process ids of the running etcd and kube-apiserver.
func (c *ControlPlane) PIDs() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pids []int
	for _, p := range []*process{c.etcd, c.apiserver} {
		if p != nil && !p.exited() {
			pids = append(pids, p.pid())
		}
	}
	return pids
}

// StopAPIServer stops kube-apiserver (SIGTERM, SIGKILL after a grace period)
// and waits until it has exited; etcd keeps running with all data. Clients
// then get connection errors until StartAPIServer. Stopping a stopped API
// server does nothing.
func (c *ControlPlane) StopAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver == nil {
		return nil
	}
	began := time.Now()
	if err := c.apiserver.stop(stopGrace); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	c.apiserver = nil
	c.logf("controlplane: kube-apiserver stopped in %v", time.Since(began).Round(time.Millisecond))
	return nil
}

// StartAPIServer starts kube-apiserver again, on the same port, with the same
// etcd, keys and tokens, and waits until it is ready; ctx bounds the wait.
// It is an error to call it while the API server runs or after Close.
func (c *ControlPlane) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("controlplane: StartAPIServer after Close")
	}
	if c.apiserver != nil {
		return errors.New("controlplane: kube-apiserver is already running")
	}
	return c.startAPIServer(ctx)
}

// startAPIServer starts kube-apiserver and waits for /readyz; on failure it
// stops it again. Called with c.mu held, or before c is shared.
func (c *ControlPlane) startAPIServer(ctx context.Context) error {
	began := time.Now()
	p, err := startProcess("kube-apiserver", c.apiserverBin, c.apiserverArgs, c.APIServerLog)
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	c.apiserver = p
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAData)
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	defer transport.CloseIdleConnections()
	if err := waitHealthy(ctx, p, c.URL+"/readyz", transport, c.pki.adminToken); err != nil {
		_ = p.stop(stopGrace)
		c.apiserver = nil
		return fmt.Errorf("controlplane: kube-apiserver: %w", markPortTaken(p, err))
	}
	c.logf("controlplane: kube-apiserver ready at %s after %v", c.URL, time.Since(began).Round(time.Millisecond))
	return nil
}

// Close stops kube-apiserver, then etcd, and waits until both have exited.
// It leaves dir in place. Calling it again does nothing.
func (c *ControlPlane) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	if c.apiserver != nil {
		errs = append(errs, c.apiserver.stop(stopGrace))
		c.apiserver = nil
	}
	if c.etcd != nil {
		errs = append(errs, c.etcd.stop(stopGrace))
		c.etcd = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("controlplane: close: %w", err)
	}
	return nil
}

func (c *ControlPlane) writeKubeconfig(path, user, token, namespace string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["edihub-test"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthorityData: c.CAData}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: "edihub-test", AuthInfo: user, Namespace: namespace}
	cfg.CurrentContext = user
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig for %s: %w", user, err)
	}
	return nil
}

// waitHealthy polls url until it answers 200, p exits, ctx ends or
// startTimeout passes. A non-empty token is sent as a bearer token.
func waitHealthy(ctx context.Context, p *process, url string, rt http.RoundTripper, token string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	// End a check in flight as soon as the process exits.
	exited := make(chan struct{})
	defer func() { <-exited }()
	defer cancel()
	go func() {
		defer close(exited)
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	client := &http.Client{Transport: rt, Timeout: 5 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-tick.C:
			continue
		case <-p.done:
		case <-ctx.Done():
		}
		if p.exited() {
			if errors.Is(err, context.Canceled) {
				last = "cut short by the exit"
			}
			return fmt.Errorf("%w before it was ready (last check: %s); log %s ends with:\n%s",
				p.exitError(), last, p.logPath, p.logTail())
		}
		return fmt.Errorf("not ready (last check: %s); log %s ends with:\n%s\n%w",
			last, p.logPath, p.logTail(), context.Cause(ctx))
	}
}

// resolvePaths returns the binary directory and RBAC manifest, locating the
// repository root only when a default needs it.
func resolvePaths(opts Options) (binDir, rbacFile string, err error) {
	binDir, rbacFile = opts.BinDir, opts.RBACFile
	if binDir == "" {
		binDir = os.Getenv(BinDirEnv)
	}
	if binDir != "" && rbacFile != "" {
		return binDir, rbacFile, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", "", err
	}
	if binDir == "" {
		binDir = filepath.Join(root, ".cache", "controlplane", "bin")
	}
	if rbacFile == "" {
		rbacFile = filepath.Join(root, "deploy", "k8s", "rbac.yaml")
	}
	return binDir, rbacFile, nil
}

// repoRoot walks up from the working directory (a package directory under
// go test) to the go.mod of module github.com/edihub/edihub.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(data) == mainModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("controlplane: no go.mod of %s above %s; set Options.BinDir and Options.RBACFile", mainModule, wd)
		}
		dir = parent
	}
}

// modulePath returns the module path declared by a go.mod file.
func modulePath(gomod []byte) string {
	for line := range strings.Lines(string(gomod)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// findBinary returns dir/name if it is an executable file, else an error
// that says how to build it.
func findBinary(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("controlplane: %s not found in %s: %s", name, dir, buildHint)
	}
	if info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("controlplane: %s is not an executable file: %s", path, buildHint)
	}
	return path, nil
}

// pickPorts chooses ports; tests replace it.
var pickPorts = freePorts

// freePorts returns n distinct free TCP ports on 127.0.0.1, none returned
// before in this process (freeport.Ports).
func freePorts(n int) ([]int, error) { return freeport.Ports(n) }
