package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/test/controlplane"
)

// replicaHandler answers /leader with s and /readyz as a replica that is
// ready, or draining when s.Identity ends in "-draining".
func replicaHandler(s leader.Status) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/leader":
			_ = json.NewEncoder(w).Encode(s)
		case "/readyz":
			if strings.HasSuffix(s.Identity, "-draining") {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"status":"unavailable","reason":"shutting down"}`))
				return
			}
			_, _ = w.Write([]byte(`{"status":"ok"}`))
		default:
			http.NotFound(w, r)
		}
	})
}

func replicaServer(t *testing.T, s leader.Status) string {
	t.Helper()
	srv := httptest.NewServer(replicaHandler(s))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestStatusCommand(t *testing.T) {
	a := leader.Status{Identity: "a-1", IsLeader: true, Holder: "a-1", FencingToken: 42, Backend: "kubernetes"}
	b := leader.Status{Identity: "b-1", Holder: "a-1", Backend: "kubernetes"}
	bOther := leader.Status{Identity: "b-1", Holder: "c-1", Backend: "kubernetes"}
	bLeads := leader.Status{Identity: "b-1", IsLeader: true, Holder: "b-1", FencingToken: 43, Backend: "kubernetes"}
	none := leader.Status{Identity: "c-1", Backend: "kubernetes"}
	tests := []struct {
		name     string
		give     []leader.Status
		wantErr  bool
		wantText []string
	}{
		{name: "one leader, all agree", give: []leader.Status{a, b}, wantText: []string{"holder a-1, fencing token 42", "b-1"}},
		{name: "nobody leads", give: []leader.Status{none, b}, wantErr: true, wantText: []string{"c-1"}},
		{name: "two leaders", give: []leader.Status{a, bLeads}, wantErr: true},
		{name: "disagree on holder", give: []leader.Status{a, bOther}, wantErr: true, wantText: []string{"c-1"}},
		// The zero Status stands for a replica that does not answer.
		{name: "one unreachable", give: []leader.Status{a, b, {}}, wantErr: true, wantText: []string{"holder a-1, fencing token 42", "unreachable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var urls []string
			for _, s := range tt.give {
				if s.Identity == "" {
					urls = append(urls, deadURL(t))
					continue
				}
				urls = append(urls, replicaServer(t, s))
			}
			out, _, err := runCmd(t, env("EDIHUB_OPS_URLS", strings.Join(urls, ",")), "status")
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, errNoConsensus)) {
				t.Errorf("edihub status = %v, want error %v (errNoConsensus)", err, tt.wantErr)
			}
			for _, w := range tt.wantText {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	if _, _, err := runCmd(t, env(), "status"); err == nil || !strings.Contains(err.Error(), "EDIHUB_OPS_URLS") {
		t.Errorf("edihub status without URLs = %v, want a message naming EDIHUB_OPS_URLS", err)
	}
}

// deadURL returns the URL of a port on which nothing listens any more.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// TestStatusUnreachableJSON: -o json names the replica that did not answer
// and why there is no consensus, and the command fails.
func TestStatusUnreachableJSON(t *testing.T) {
	dead := deadURL(t)
	urls := []string{
		replicaServer(t, leader.Status{Identity: "a-1", IsLeader: true, Holder: "a-1", FencingToken: 5, Backend: "postgres"}),
		dead,
	}
	out, _, err := runCmd(t, env("EDIHUB_OPS_URLS", strings.Join(urls, ",")), "status", "-o", "json")
	if !errors.Is(err, errNoConsensus) || !strings.Contains(err.Error(), dead) {
		t.Errorf("edihub status -o json with %s unreachable = %v, want errNoConsensus naming it", dead, err)
	}
	var got clusterView
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if got.Consensus || !strings.Contains(got.Problem, "did not answer") || got.Replicas[1].Error == "" {
		t.Errorf("status = %+v, want no consensus, the problem naming the unreachable replica, its error", got)
	}
}

// TestStatusOmitsZeroLastSuccess: a worker that never succeeded on a
// replica (every worker on a follower) has no last_success, in GET /leader
// as in edihub status -o json, rather than 0001-01-01T00:00:00Z.
func TestStatusOmitsZeroLastSuccess(t *testing.T) {
	done := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	lead := leader.Status{Identity: "a-1", IsLeader: true, Holder: "a-1", FencingToken: 5, Backend: "postgres",
		Workers: map[string]leader.WorkerStatus{"heartbeat": {Running: true, LastSuccess: done}}}
	follower := leader.Status{Identity: "b-1", Holder: "a-1", Backend: "postgres",
		Workers: map[string]leader.WorkerStatus{"heartbeat": {}}}
	b, err := json.Marshal(follower)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "last_success") {
		t.Errorf("GET /leader of a follower = %s, want no last_success", b)
	}
	out, _, err := runCmd(t, env("EDIHUB_OPS_URLS", replicaServer(t, lead)+","+replicaServer(t, follower)), "status", "-o", "json")
	if err != nil {
		t.Fatalf("edihub status -o json = %v\n%s", err, out)
	}
	if strings.Contains(out, `"last_success": "0001-01-01`) || strings.Count(out, `"last_success": "2026-12-01T10:00:00Z"`) != 1 {
		t.Errorf("edihub status -o json = %s, want the leader's last_success only", out)
	}
}

// TestStatusJSONAndDNS finds three replicas behind one DNS name (as behind
// a headless Service: one port, an address each) and prints their view as
// JSON, health included.
func TestStatusJSONAndDNS(t *testing.T) {
	statuses := []leader.Status{
		{Identity: "edihub-a", IsLeader: true, Holder: "edihub-a", FencingToken: 7, Backend: "kubernetes"},
		{Identity: "edihub-b", Holder: "edihub-a", Backend: "kubernetes"},
		{Identity: "edihub-c-draining", Holder: "edihub-a", Backend: "kubernetes"},
	}
	ips := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	port := listenAll(t, ips, statuses)

	lookupHost = func(_ context.Context, host string) ([]string, error) {
		if host != "edihub-ops.edihub.svc" {
			return nil, fmt.Errorf("no such host %s", host)
		}
		return []string{ips[2], ips[0], ips[1]}, nil
	}
	t.Cleanup(func() { lookupHost = net.DefaultResolver.LookupHost })

	out, _, err := runCmd(t, env("EDIHUB_OPS_DNS", "edihub-ops.edihub.svc:"+port), "status", "-o", "json")
	if err != nil {
		t.Fatalf("edihub status -o json = %v\n%s", err, out)
	}
	var got clusterView
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if got.Leader != "edihub-a" || got.FencingToken != 7 || !got.Consensus || len(got.Replicas) != 3 {
		t.Fatalf("status = %+v, want leader edihub-a, token 7, consensus, three replicas", got)
	}
	for i, r := range got.Replicas {
		wantURL := "http://" + net.JoinHostPort(ips[i], port)
		wantReady := i != 2
		if r.URL != wantURL || r.Status == nil || r.Status.Identity != statuses[i].Identity || r.Ready != wantReady {
			t.Errorf("replica %d = %+v, want %s (%s) ready %v", i, r, wantURL, statuses[i].Identity, wantReady)
		}
	}
	if h := got.Replicas[2].Health; h != "not ready: shutting down" {
		t.Errorf("draining replica's health = %q, want not ready: shutting down", h)
	}

	// The table shows health too; no leader is an error in both formats.
	out, _, err = runCmd(t, env("EDIHUB_OPS_DNS", "edihub-ops.edihub.svc:"+port), "status")
	if err != nil || !strings.Contains(out, "not ready: shutting down") || !strings.Contains(out, "holder edihub-a, fencing token 7") {
		t.Errorf("edihub status = %v\n%s", err, out)
	}
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"bad output", []string{"EDIHUB_OPS_DNS", "edihub-ops.edihub.svc:" + port}, []string{"-o", "yaml"}, "-output"},
		{"no port", []string{"EDIHUB_OPS_DNS", "edihub-ops.edihub.svc"}, nil, "host:port"},
		{"unknown name", []string{"EDIHUB_OPS_DNS", "nowhere:9090"}, nil, "resolve EDIHUB_OPS_DNS"},
	}
	for _, tt := range tests {
		_, _, err := runCmd(t, env(tt.env...), append([]string{"status"}, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: edihub status = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

// listenAll serves statuses[i] on ips[i], all on one port, and returns it.
func listenAll(t *testing.T, ips []string, statuses []leader.Status) string {
	t.Helper()
	for try := 0; try < 20; try++ {
		first, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(first.Addr().String())
		lns := []net.Listener{first}
		for _, ip := range ips[1:] {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, port))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if len(lns) < len(ips) {
			for _, ln := range lns {
				ln.Close()
			}
			continue
		}
		for i, ln := range lns {
			srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: replicaHandler(statuses[i]), ReadHeaderTimeout: time.Second}}
			srv.Start()
			t.Cleanup(srv.Close)
		}
		return port
	}
	t.Fatal("found no port free on every loopback address")
	return ""
}

// TestStatusReadsLease shows the Lease from a real kube-apiserver beside
// the replicas' views, with the rights of the shipped Role (get on
// edihub-leader), and reports a Lease that names another holder than the
// replica that leads.
func TestStatusReadsLease(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	holder := "edihub-a-1234"
	transitions := int32(3)
	if _, err := admin.CoordinationV1().Leases(cp.Namespace).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "edihub-leader"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseTransitions: &transitions},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	urls := []string{
		replicaServer(t, leader.Status{Identity: holder, IsLeader: true, Holder: holder, FencingToken: 9, Backend: "kubernetes"}),
		replicaServer(t, leader.Status{Identity: "edihub-b-5678", Holder: holder, Backend: "kubernetes"}),
	}
	getenv := env("EDIHUB_OPS_URLS", strings.Join(urls, ","), "EDIHUB_KUBECONFIG", cp.EdihubKubeconfig, "POD_NAMESPACE", cp.Namespace)
	out, _, err := runCmd(t, getenv, "status", "-o", "json")
	if err != nil {
		t.Fatalf("edihub status = %v\n%s", err, out)
	}
	var got clusterView
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if l := got.Lease; l == nil || l.Error != "" || l.Holder != holder || l.Transitions != 3 || l.Namespace != cp.Namespace || l.ResourceVersion == "" {
		t.Fatalf("lease = %+v, want holder %s, 3 transitions, in %s", got.Lease, holder, cp.Namespace)
	}
	out, _, err = runCmd(t, getenv, "status")
	if err != nil || !strings.Contains(out, "Lease "+cp.Namespace+"/edihub-leader: holder "+holder+", transitions 3") {
		t.Errorf("edihub status = %v\n%s", err, out)
	}

	// A Lease that names someone else than the replica that leads.
	urls[0] = replicaServer(t, leader.Status{Identity: "edihub-c-9999", IsLeader: true, Holder: "edihub-c-9999", FencingToken: 10, Backend: "kubernetes"})
	urls[1] = replicaServer(t, leader.Status{Identity: "edihub-b-5678", Holder: "edihub-c-9999", Backend: "kubernetes"})
	out, _, err = runCmd(t, env("EDIHUB_OPS_URLS", strings.Join(urls, ","), "EDIHUB_KUBECONFIG", cp.EdihubKubeconfig, "POD_NAMESPACE", cp.Namespace), "status")
	if !errors.Is(err, errNoConsensus) || !strings.Contains(err.Error(), "the Lease names") {
		t.Errorf("edihub status with a Lease naming another holder = %v, want errNoConsensus naming the Lease\n%s", err, out)
	}
}
