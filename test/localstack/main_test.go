package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edihub/edihub/test/cluster"
)

// TestMakeRunTwice runs the local stack the way "make run" does (the built
// edihub and localstack binaries, the default Kubernetes leader backend, a
// real kube-apiserver, etcd and PostgreSQL), twice in a row: first from a
// state directory that does not exist, then from the one the first run left.
// Each time three replicas become ready, exactly one leads, a document sent
// to the demo partner is delivered on an async MDN the leader's poller
// applied, and Ctrl-C (SIGINT to the process group)
// leaves no process and no listening port behind.
//
// The first run lasts, as a developer's does: many writes advance etcd's
// revision far past where the run began, docs/local-stack.md's kill -9 of the
// leader makes a successor open a term whose fence is that high revision,
// and the successor is killed too, just before Ctrl-C, so its Lease is
// left held by a dead process. The second run must still have a leader
// within a lease duration of its replicas' start: its Lease's
// resourceVersions continue above the fence in PostgreSQL.
func TestMakeRunTwice(t *testing.T) {
	root := repoRoot(t)
	bin := t.TempDir()
	edihub, localstack := filepath.Join(bin, "edihub"), filepath.Join(bin, "edihub-localstack")
	for out, pkg := range map[string]string{edihub: "./cmd/edihub", localstack: "./test/localstack"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	// PostgreSQL runs as the postgres user when we are root: it must reach
	// the state directory through the test's temporary directories.
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(tmp, "state") // does not exist yet
	offset := freeOffset(t)
	for run := 1; run <= 2; run++ {
		t.Run(fmt.Sprintf("run%d", run), func(t *testing.T) {
			runStack(t, root, localstack, edihub, state, offset, run == 1)
		})
		if t.Failed() {
			return
		}
	}
}

// demo850 is X12's published 004010X357 example 01 (a basic purchase
// order) in an envelope from EDIHUB to DEMO PARTNER.
const demo850 = "ISA*00*          *00*          *ZZ*EDIHUB         *ZZ*DEMO PARTNER   *261201*0101*U*00401*000000001*0*T*>~\n" +
	"GS*PO*EDIHUB*DEMO PARTNER*20261201*0101*1*X*004010X357~\nST*850*0001~\nBEG*00*RL*508517*1001*20000506**NA*IEL~\n" +
	"N1*BY*ABC Aerospace Corporation*9*123456789-0101~\nN3*1000 BOARDWALK DRIVE~\nN4*SOMEWHERE*CA*98898~\n" +
	"PO1*1*48*EA*3*PE*MG*R5656-2~\nIT8*******B0~\nCTT*1~\nAMT*TT*144~\nSE*10*0001~\nGE*1*1~\nIEA*1*000000001~\n"

// leaseDuration is the replicas' lease duration (EDIHUB_LEASE_DURATION's
// default, which the local stack keeps).
const leaseDuration = 30 * time.Second

// leaderStatus is the part of a replica's GET /leader the test reads.
type leaderStatus struct {
	Identity     string    `json:"identity"`
	IsLeader     bool      `json:"is_leader"`
	Backend      string    `json:"backend"`
	FencingToken int64     `json:"fencing_token"`
	Since        time.Time `json:"since"`
}

// runStack runs the stack once. With long, it acts out a long run before
// Ctrl-C (see TestMakeRunTwice).
func runStack(t *testing.T, root, localstack, edihub, state string, offset int, long bool) {
	cmd := exec.Command(localstack, "-binary", edihub, "-state", state, "-port-offset", strconv.Itoa(offset))
	cmd.Dir = root
	cmd.Env = withoutEnv(os.Environ(), "EDIHUB_LEADER_BACKEND", "EDIHUB_DATABASE_URL")
	// Ctrl-C in a terminal signals the foreground process group: make and
	// the localstack process; its children run in groups of their own.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &syncBuffer{}
	up := make(chan struct{})
	// replicasStarted is when the first replica logged its first line.
	var replicasStarted time.Time
	startedSeen := make(chan struct{})
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	go func() {
		s := bufio.NewScanner(pr)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		once, startedOnce := sync.Once{}, sync.Once{}
		for s.Scan() {
			line := s.Text()
			out.WriteString(line + "\n")
			if strings.HasPrefix(line, "replica-") {
				startedOnce.Do(func() { replicasStarted = time.Now(); close(startedSeen) })
			}
			if strings.Contains(line, "stack is up") {
				once.Do(func() { close(up) })
			}
		}
	}()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); _ = pw.Close() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("localstack output:\n%s", out.String())
		}
	})

	select {
	case <-up:
	case err := <-exited:
		stopped = true
		t.Fatalf("localstack exited before the stack was up: %v", err)
	case <-time.After(5 * time.Minute):
		t.Fatal("the stack was not up after 5 minutes")
	}

	pt := ports{options{portOffset: offset}}
	client := &http.Client{Timeout: 10 * time.Second}
	for i := 1; i <= 3; i++ {
		if code := get(t, client, "http://"+pt.replicaOps(i)+"/readyz", nil); code != http.StatusOK {
			t.Errorf("replica-%d /readyz = %d, want 200", i, code)
		}
	}

	// Exactly one replica leads, within a lease duration of the replicas'
	// start: the first replica to campaign takes the Lease at once (the
	// stack releases a Lease left by a killed replica of the last run),
	// and its term opens, as the Lease's resourceVersion is above the
	// fence the last run left in PostgreSQL.
	<-startedSeen
	leaders, lead := waitLeader(t, client, pt, replicasStarted.Add(leaseDuration+15*time.Second))
	if len(leaders) != 1 {
		t.Errorf("leaders %v, want exactly one", leaders)
	} else if took := lead.Since.Sub(replicasStarted); took > leaseDuration {
		t.Errorf("%s became leader %v after the replicas started, want within the lease duration %v", lead.Identity, took.Round(time.Millisecond), leaseDuration)
	} else {
		t.Logf("%s leads with fencing token %d, %v after the replicas started", lead.Identity, lead.FencingToken, took.Round(time.Millisecond))
	}

	// The listing names the first admin and its password, kept in the
	// state directory.
	adminPassword, err := os.ReadFile(filepath.Join(state, "admin-password"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "user admin, password " + strings.TrimSpace(string(adminPassword)); !strings.Contains(out.String(), want) {
		t.Errorf("the start-up listing lacks %q", want)
	}

	// A document to the demo partner is delivered, and its 997 comes back:
	// an 850 (X12's published 004010X357 example 01 in an envelope).
	token, err := os.ReadFile(filepath.Join(state, "api-token"))
	if err != nil {
		t.Fatal(err)
	}
	auth := "Bearer " + strings.TrimSpace(string(token))
	req, _ := http.NewRequest(http.MethodPost, "http://"+pt.replicaHTTP(1)+"/api/v1/messages?partner=DEMO%20PARTNER",
		strings.NewReader(demo850))
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/EDI-X12")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var queued struct {
		ID int64 `json:"id"`
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 || json.Unmarshal(body, &queued) != nil || queued.ID == 0 {
		t.Fatalf("POST /api/v1/messages = %d %s, want 2xx with an id", resp.StatusCode, body)
	}
	var msg struct {
		Status    string `json:"status"`
		Error     string `json:"error"`
		MDNMode   string `json:"mdn_mode"`
		MessageID string `json:"message_id"`
		Ack       string `json:"ack"`
	}
	for deadline := time.Now().Add(90 * time.Second); ; {
		get(t, client, fmt.Sprintf("http://%s/api/v1/messages/%d", pt.replicaHTTP(2), queued.ID), &msg, "Authorization", auth)
		if (msg.Status == "delivered" && msg.Ack != "pending") || msg.Status == "failed" || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond) // stays: bounded poll of a real replica's API, which signals nothing
	}
	if msg.Status != "delivered" || msg.Ack != "accepted" {
		t.Errorf("message %d to DEMO PARTNER: status %q (%s), ack %q; want delivered, accepted (the demo partner's 997)", queued.ID, msg.Status, msg.Error, msg.Ack)
	}
	// It asked for an async MDN, and the leader's MDN poller applied the
	// MDN the demo station posted: the inbox lists it processed, for this
	// message, with the fence of the term that decided it.
	if msg.MDNMode != "async" {
		t.Errorf("message %d to DEMO PARTNER: mdn_mode %q, want async (the hub's partner profile asks for async MDNs)", queued.ID, msg.MDNMode)
	}
	var inbox struct {
		MDNs []struct {
			State             string `json:"state"`
			Result            string `json:"result"`
			OriginalMessageID string `json:"original_message_id"`
			Message           *int64 `json:"message"`
			Fence             *int64 `json:"fence"`
		} `json:"mdns"`
	}
	get(t, client, "http://"+pt.replicaHTTP(3)+"/api/v1/mdns?state=processed&limit=500", &inbox, "Authorization", auth)
	applied := false
	for _, m := range inbox.MDNs {
		if m.Message != nil && *m.Message == queued.ID {
			applied = m.State == "processed" && m.Result == "delivered" && m.OriginalMessageID == msg.MessageID && m.Fence != nil
			if !applied {
				t.Errorf("inbox MDN for message %d: %+v, want processed, result delivered, Original-Message-ID %q, a fence", queued.ID, m, msg.MessageID)
			}
		}
	}
	if !applied {
		t.Errorf("GET /api/v1/mdns?state=processed lists no MDN for message %d (%d listed): the leader's poller did not apply an async MDN", queued.ID, len(inbox.MDNs))
	}

	if long {
		longRun(t, client, pt, state, cmd.Process.Pid)
	}

	// Ctrl-C: nothing the stack started outlives it.
	procs := descendants(cmd.Process.Pid)
	listening := listeningPorts(procs)
	// The balancer, 3 × 2 replica listeners, the demo partner's front and
	// its station's two, PostgreSQL, and the control plane's: 14, and 2
	// fewer for the replica longRun killed last.
	want := 14
	if long {
		want -= 2
	}
	if len(listening) < want {
		t.Errorf("the stack listens on %v (%d ports); expected at least the balancer's, the replicas', the demo station's, PostgreSQL's and the control plane's, %d or more", listening, len(listening), want)
	}
	t.Logf("stack: %d processes, listening on %v", len(procs), listening)
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("localstack after Ctrl-C: %v, want exit status 0", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("localstack still running 60 s after Ctrl-C")
	}
	for _, pid := range procs {
		if alive(pid) {
			t.Errorf("process %d (%s) still running after Ctrl-C", pid, comm(pid))
		}
	}
	for _, port := range listening {
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
			t.Errorf("port %d still in use after Ctrl-C: %v", port, err)
		} else {
			l.Close()
		}
	}
}

// waitLeader polls the replicas' /leader until exactly one leads or the
// deadline passes; it returns the leaders' identities and, when there is
// one, its status.
func waitLeader(t *testing.T, client *http.Client, pt ports, deadline time.Time) ([]string, leaderStatus) {
	t.Helper()
	for {
		var leaders []string
		var lead leaderStatus
		for i := 1; i <= 3; i++ {
			var st leaderStatus
			if _, err := fetch(client, "http://"+pt.replicaOps(i)+"/leader", &st); err != nil {
				continue // not running: a replica the test killed
			}
			if st.Backend != "kubernetes" {
				t.Fatalf("replica-%d leader backend %q, want kubernetes (make run's default)", i, st.Backend)
			}
			if st.IsLeader {
				leaders = append(leaders, st.Identity)
				lead = st
			}
		}
		if len(leaders) == 1 || time.Now().After(deadline) {
			return leaders, lead
		}
		time.Sleep(250 * time.Millisecond) // stays: bounded poll of the real replicas' /leader
	}
}

// fillerWrites is how many writes longRun makes to advance etcd's
// revision: far more than a fresh control plane's start writes (about
// 200), so that a stack starting a fresh etcd stays below the fence for
// minutes.
const fillerWrites = 500

// longRun acts out a long first run: it advances etcd's revision by
// fillerWrites, kills the leader with SIGKILL (docs/local-stack.md's step) and
// waits for a successor, whose term's fence is above all those writes, and
// for the stack to restart the killed replica; then it kills the successor
// too, leaving the Lease held by a dead process.
func longRun(t *testing.T, client *http.Client, pt ports, state string, stack int) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(state, "controlplane", "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 200, 200
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cms := cs.CoreV1().ConfigMaps("edihub")
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "revision-filler"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range fillerWrites {
		cm.Data = map[string]string{"n": strconv.Itoa(i)}
		if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	revision, _ := strconv.ParseInt(cm.ResourceVersion, 10, 64)

	// kill sends SIGKILL to the replica that is identity and returns its
	// ops address.
	kill := func(identity string) string {
		t.Helper()
		for i := 1; i <= 3; i++ {
			var st leaderStatus
			if _, err := fetch(client, "http://"+pt.replicaOps(i)+"/leader", &st); err != nil || st.Identity != identity {
				continue
			}
			pid := listenerPID(descendants(stack), pt.replicaOps(i))
			if pid == 0 {
				t.Fatalf("no process of the stack listens on %s (%s)", pt.replicaOps(i), identity)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			return pt.replicaOps(i)
		}
		t.Fatalf("no replica is %s", identity)
		return ""
	}
	leaders, lead := waitLeader(t, client, pt, time.Now().Add(10*time.Second))
	if len(leaders) != 1 {
		t.Fatalf("leaders %v before the kill, want exactly one", leaders)
	}
	killed := kill(lead.Identity)
	// The successor waits for the dead leader's Lease to expire.
	var next leaderStatus
	for deadline := time.Now().Add(leaseDuration + 30*time.Second); ; {
		leaders, next = waitLeader(t, client, pt, deadline)
		if len(leaders) != 1 || next.Identity != lead.Identity || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond) // stays: bounded poll while the real Lease expires
	}
	if len(leaders) != 1 || next.Identity == lead.Identity {
		t.Fatalf("leaders %v after killing %s, want another replica", leaders, lead.Identity)
	}
	if next.FencingToken <= revision {
		t.Fatalf("%s leads with fencing token %d, want above etcd's revision %d after the filler writes", next.Identity, next.FencingToken, revision)
	}
	t.Logf("%s took over from the killed %s with fencing token %d (the run began near revision 200)", next.Identity, lead.Identity, next.FencingToken)
	// The stack started the killed replica again long since (a back-off
	// of a second), as a new process with an identity of its own.
	var back leaderStatus
	for deadline := time.Now().Add(20 * time.Second); ; {
		code, _ := fetch(client, "http://"+killed+"/readyz", nil)
		_, err := fetch(client, "http://"+killed+"/leader", &back)
		if code == http.StatusOK && err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond) // stays: bounded poll until the restarted process answers
	}
	if back.Identity == "" || back.Identity == lead.Identity {
		t.Errorf("the replica on %s after its kill -9: identity %q, want a restarted process (not %s) that is ready", killed, back.Identity, lead.Identity)
	}
	kill(next.Identity)
}

// listenerPID returns the process among pids that listens on addr, or 0.
func listenerPID(pids []int, addr string) int {
	_, port, _ := net.SplitHostPort(addr)
	want, _ := strconv.Atoi(port)
	for _, pid := range pids {
		if slices.Contains(listeningPorts([]int{pid}), want) {
			return pid
		}
	}
	return 0
}

// get fetches url into v (when not nil) and returns the status code.
func get(t *testing.T, c *http.Client, url string, v any, header ...string) int {
	t.Helper()
	code, err := fetch(c, url, v, header...)
	if err != nil {
		t.Error(err)
	}
	return code
}

// fetch is get without a test: the status code (0 when there was no
// answer) and what went wrong.
func fetch(c *http.Client, url string, v any, header ...string) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			return resp.StatusCode, fmt.Errorf("GET %s: %d, body not JSON: %w", url, resp.StatusCode, err)
		}
	}
	return resp.StatusCode, nil
}

// freeOffset picks a port offset at which every fixed port of the stack is
// free, so the test runs beside a developer's make run.
func freeOffset(t *testing.T) int {
	for range 50 {
		off := 100 * (1 + rand.IntN(99)) // 100..9900: PostgreSQL stays below 65536
		pt := ports{options{portOffset: off}}
		addrs := []string{pt.balancer(), pt.demoHTTP(), pt.demoOps(), fmt.Sprintf("127.0.0.1:%d", pt.postgres())}
		for i := 1; i <= 3; i++ {
			addrs = append(addrs, pt.replicaHTTP(i), pt.replicaOps(i))
		}
		if cluster.CheckFree(addrs...) == nil {
			return off
		}
	}
	t.Fatal("no free port offset found")
	return 0
}

func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

func withoutEnv(env []string, names ...string) []string {
	var out []string
next:
	for _, kv := range env {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// descendants returns pid and every process below it (from /proc).
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := ppid(p); ok {
			children[pp] = append(children[pp], p)
		}
	}
	all := []int{pid}
	for i := 0; i < len(all); i++ {
		all = append(all, children[all[i]]...)
	}
	return all
}

// stat returns the fields of /proc/pid/stat after the command name.
func stat(pid int) ([]string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(b[i+1:])), true
}

func ppid(pid int) (int, bool) {
	f, ok := stat(pid)
	if !ok || len(f) < 2 {
		return 0, false
	}
	p, err := strconv.Atoi(f[1])
	return p, err == nil
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	f, ok := stat(pid)
	return ok && len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// listeningPorts returns the TCP ports on which the processes listen.
func listeningPorts(pids []int) []int {
	inodes := map[string]bool{}
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	var ports []int
	seen := map[int]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" || !inodes[fs[9]] { // 0A: LISTEN
				continue
			}
			i := strings.LastIndexByte(fs[1], ':')
			p, err := strconv.ParseInt(fs[1][i+1:], 16, 32)
			if err == nil && !seen[int(p)] {
				seen[int(p)] = true
				ports = append(ports, int(p))
			}
		}
	}
	return ports
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) WriteString(x string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(x)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
