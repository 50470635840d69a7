package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edihub/edihub/internal/leader"
)

// statusOptions are the settings of edihub status.
type statusOptions struct {
	opsURLs string
	opsDNS  string
	output  string
	timeout time.Duration
	// The Lease, read when a namespace is known (flag, POD_NAMESPACE or
	// the pod's service account).
	leaseName      string
	leaseNamespace string
	kubeconfig     string
}

func statusFlags(fs *flagSet) func(context.Context, *environment) error {
	var o statusOptions
	fs.String(&o.opsURLs, "ops-urls", "", "comma-separated ops listener URLs of the replicas, e.g. http://10.0.0.1:9090,http://10.0.0.2:9090")
	fs.String(&o.opsDNS, "ops-dns", "", "host:port whose DNS addresses are the replicas' ops listeners; used when -ops-urls is empty")
	fs.ActionString(&o.output, "output", "table", "output format: table or json (also -o)")
	fs.ActionString(&o.output, "o", "table", "short for -output")
	fs.Duration(&o.timeout, "timeout", 3*time.Second, "how long to wait for each replica's answer")
	fs.String(&o.leaseName, "lease-name", "edihub-leader", "name of the leader Lease to show beside the replicas' views")
	fs.String(&o.leaseNamespace, "lease-namespace", "", "namespace of the Lease; default: the pod's service-account namespace; none: the Lease is not read", "POD_NAMESPACE")
	fs.String(&o.kubeconfig, "kubeconfig", "", "kubeconfig file for reading the Lease; empty: the in-cluster service account", "KUBECONFIG")
	return func(ctx context.Context, env *environment) error { return status(ctx, env, o) }
}

// leaseView is the leader Lease as the API server has it.
type leaseView struct {
	Name            string     `json:"name"`
	Namespace       string     `json:"namespace"`
	Holder          string     `json:"holder"`
	Transitions     int32      `json:"transitions"`
	RenewTime       *time.Time `json:"renew_time,omitempty"`
	ResourceVersion string     `json:"resource_version"`
	Error           string     `json:"error,omitempty"`
}

// readLease reads the Lease when a namespace is known; nil when not.
func readLease(ctx context.Context, o statusOptions) *leaseView {
	lo := leaderOptions{leaseName: o.leaseName, namespace: o.leaseNamespace, kubeconfig: o.kubeconfig, renewDeadline: 2 * o.timeout}
	ns, err := lo.resolveNamespace(os.ReadFile)
	if err != nil {
		return nil
	}
	v := &leaseView{Name: o.leaseName, Namespace: ns}
	cs, _, err := lo.kubeClients()
	if err != nil {
		v.Error = err.Error()
		return v
	}
	l, err := cs.CoordinationV1().Leases(ns).Get(ctx, o.leaseName, metav1.GetOptions{})
	if err != nil {
		v.Error = fmt.Sprintf("get Lease %s/%s: %v", ns, o.leaseName, err)
		return v
	}
	v.ResourceVersion = l.ResourceVersion
	if l.Spec.HolderIdentity != nil {
		v.Holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		v.Transitions = *l.Spec.LeaseTransitions
	}
	if l.Spec.RenewTime != nil {
		t := l.Spec.RenewTime.Time
		v.RenewTime = &t
	}
	return v
}

// errNoConsensus is returned when the replicas disagree on the holder,
// none or several lead, or one does not answer.
var errNoConsensus = errors.New("no single leader")

// lookupHost resolves -ops-dns; tests replace it.
var lookupHost = net.DefaultResolver.LookupHost

// replicaView is one replica's answer, as -o json prints it.
type replicaView struct {
	URL string `json:"url"`
	// Status is the replica's GET /leader; nil when unreachable.
	Status *leader.Status `json:"status,omitempty"`
	// PartnersRevision is the partner set revision the replica serves.
	PartnersRevision int64 `json:"partners_revision"`
	// Ready is whether GET /readyz answered 200; Health is its answer or
	// the error.
	Ready  bool   `json:"ready"`
	Health string `json:"health"`
	Error  string `json:"error,omitempty"`
}

// clusterView is what edihub status -o json prints.
type clusterView struct {
	Leader       string        `json:"leader,omitempty"`
	FencingToken int64         `json:"fencing_token,omitempty"`
	Since        *time.Time    `json:"since,omitempty"`
	Lease        *leaseView    `json:"lease,omitempty"`
	Consensus    bool          `json:"consensus"`
	Problem      string        `json:"problem,omitempty"`
	Replicas     []replicaView `json:"replicas"`
}

// replicaURLs returns the ops URLs to ask: -ops-urls, else one per address
// of -ops-dns.
func replicaURLs(ctx context.Context, o statusOptions) ([]string, error) {
	var urls []string
	for _, u := range strings.Split(o.opsURLs, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) > 0 || o.opsDNS == "" {
		return urls, nil
	}
	host, port, err := net.SplitHostPort(o.opsDNS)
	if err != nil || host == "" || port == "" {
		return nil, fmt.Errorf("EDIHUB_OPS_DNS (-ops-dns) = %q: want host:port, e.g. edihub-ops.edihub.svc.cluster.local:9090", o.opsDNS)
	}
	addrs, err := lookupHost(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolve EDIHUB_OPS_DNS (-ops-dns) %s: %w", host, err)
	}
	sort.Strings(addrs)
	for _, a := range addrs {
		urls = append(urls, "http://"+net.JoinHostPort(a, port))
	}
	return urls, nil
}

// status prints each replica's view of the election and its health, and
// checks that every replica answers and all agree on exactly one leader.
func status(ctx context.Context, env *environment, o statusOptions) error {
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("-output (-o) = %q: want table or json", o.output)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("EDIHUB_TIMEOUT (-timeout) must be positive, got %s", o.timeout)
	}
	urls, err := replicaURLs(ctx, o)
	if err != nil {
		return err
	}
	if len(urls) == 0 {
		return errors.New("no replicas to ask: set EDIHUB_OPS_URLS (or -ops-urls) to their ops URLs, e.g. http://127.0.0.1:9091,http://127.0.0.1:9092, or EDIHUB_OPS_DNS (or -ops-dns) to the headless Service's name and port")
	}
	view := clusterView{Replicas: askReplicas(ctx, &http.Client{Timeout: o.timeout}, urls)}
	view.Lease = readLease(ctx, o)
	leaders, problem := judge(&view)

	if o.output == "json" {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(view); err != nil {
			return err
		}
		return problem
	}
	printStatus(env.stdout, view, leaders)
	return problem
}

// askReplicas asks each replica, in turn, for its view of the election and
// its health.
func askReplicas(ctx context.Context, client *http.Client, urls []string) []replicaView {
	replicas := make([]replicaView, len(urls))
	for i, u := range urls {
		r := &replicas[i]
		r.URL = u
		st, err := fetchStatus(ctx, client, u+"/leader")
		if err != nil {
			r.Error = err.Error()
		} else {
			r.Status, r.PartnersRevision = &st.Status, st.PartnersRevision
		}
		r.Ready, r.Health = fetchHealth(ctx, client, u+"/readyz")
	}
	return replicas
}

// judge fills in view's leader and consensus from its replicas and Lease.
// It returns the replicas that say they lead and, without consensus, an
// errNoConsensus error that says why.
func judge(view *clusterView) ([]leader.Status, error) {
	holders := map[string]bool{}
	var leaders []leader.Status
	var unreachable []string
	for _, r := range view.Replicas {
		if r.Status == nil {
			unreachable = append(unreachable, r.URL)
			continue
		}
		holders[r.Status.Holder] = true
		if r.Status.IsLeader {
			leaders = append(leaders, *r.Status)
		}
	}
	var problem error
	switch {
	case len(leaders) == 0:
		problem = fmt.Errorf("%w: no replica leads", errNoConsensus)
	case len(leaders) > 1:
		problem = fmt.Errorf("%w: %d replicas say they lead", errNoConsensus, len(leaders))
	case len(holders) > 1:
		problem = fmt.Errorf("%w: the replicas disagree on the holder", errNoConsensus)
	case view.Lease != nil && view.Lease.Error == "" && view.Lease.Holder != leaders[0].Identity:
		problem = fmt.Errorf("%w: the Lease names %q, replica %s leads", errNoConsensus, view.Lease.Holder, leaders[0].Identity)
	case len(unreachable) > 0:
		// A replica that does not answer may be cut off and still
		// believe it leads: the others' agreement proves nothing.
		problem = fmt.Errorf("%w: %d of %d replicas did not answer (%s)", errNoConsensus, len(unreachable), len(view.Replicas), strings.Join(unreachable, ", "))
	}
	if len(leaders) > 0 {
		view.Leader, view.FencingToken, view.Since = leaders[0].Identity, leaders[0].FencingToken, &leaders[0].Since
	}
	view.Consensus = problem == nil
	if problem != nil {
		view.Problem = problem.Error()
	}
	return leaders, problem
}

// printStatus writes view as the table edihub status prints by default.
func printStatus(w io.Writer, view clusterView, leaders []leader.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tIDENTITY\tLEADER\tHOLDER\tTOKEN\tBACKEND\tSINCE\tPARTNERS\tHEALTH")
	newest := int64(0)
	for _, r := range view.Replicas {
		newest = max(newest, r.PartnersRevision)
	}
	for _, r := range view.Replicas {
		if r.Status == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\tunreachable: %s\n", r.URL, r.Error)
			continue
		}
		s := r.Status
		rev := fmt.Sprintf("rev %d", r.PartnersRevision)
		if r.PartnersRevision < newest {
			rev += " (behind)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%d\t%s\t%s\t%s\t%s\n", r.URL, s.Identity, s.IsLeader, orDash(s.Holder), s.FencingToken, s.Backend, s.Since.Format(time.RFC3339), rev, r.Health)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	if l := view.Lease; l != nil {
		if l.Error != "" {
			fmt.Fprintf(w, "Lease %s/%s: %s\n", l.Namespace, l.Name, l.Error)
		} else {
			renewed := "-"
			if l.RenewTime != nil {
				renewed = l.RenewTime.Format(time.RFC3339)
			}
			fmt.Fprintf(w, "Lease %s/%s: holder %s, transitions %d, renewed %s, resourceVersion %s\n", l.Namespace, l.Name, orDash(l.Holder), l.Transitions, renewed, l.ResourceVersion)
		}
	}
	if len(leaders) == 1 {
		fmt.Fprintf(w, "holder %s, fencing token %d\n", leaders[0].Identity, leaders[0].FencingToken)
	}
}

// fetchHealth asks a replica's /readyz: ready, and "ready" or why not.
func fetchHealth(ctx context.Context, c *http.Client, url string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return false, "unreachable"
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return true, "ready"
	}
	var body struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
		Status string `json:"status"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body)
	why := body.Error
	if why == "" {
		why = body.Reason
	}
	if why == "" {
		why = body.Status
	}
	if why == "" {
		why = resp.Status
	}
	return false, "not ready: " + why
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// opsStatus is a replica's GET /leader: the election as it sees it, and
// the partner set revision it serves.
type opsStatus struct {
	leader.Status
	PartnersRevision int64 `json:"partners_revision"`
}

func fetchStatus(ctx context.Context, c *http.Client, url string) (opsStatus, error) {
	var s opsStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return s, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("GET %s: %w", url, err)
	}
	return s, nil
}
