package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/edihub/edihub/internal/leader"
)

// statusOptions are the settings of edihub status.
type statusOptions struct {
	opsURLs string
	timeout time.Duration
}

func statusFlags(fs *flagSet) func(context.Context, *environment) error {
	var o statusOptions
	fs.String(&o.opsURLs, "ops-urls", "", "comma-separated ops listener URLs of the replicas, e.g. http://10.0.0.1:9090,http://10.0.0.2:9090")
	fs.Duration(&o.timeout, "timeout", 3*time.Second, "how long to wait for each replica's answer")
	return func(ctx context.Context, env *environment) error { return status(ctx, env, o) }
}

// errNoConsensus is returned when the replicas disagree on the holder or
// none leads.
var errNoConsensus = errors.New("no single leader")

// status prints each replica's view of the election and checks that they
// agree on exactly one leader.
func status(ctx context.Context, env *environment, o statusOptions) error {
	var urls []string
	for _, u := range strings.Split(o.opsURLs, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return errors.New("no replicas to ask: set EDIHUB_OPS_URLS (or -ops-urls) to their ops URLs, e.g. http://127.0.0.1:9091,http://127.0.0.1:9092")
	}
	if o.timeout <= 0 {
		return fmt.Errorf("EDIHUB_TIMEOUT (-timeout) must be positive, got %s", o.timeout)
	}
	client := &http.Client{Timeout: o.timeout}
	type view struct {
		url string
		st  leader.Status
		err error
	}
	views := make([]view, len(urls))
	for i, u := range urls {
		views[i].url = u
		views[i].st, views[i].err = fetchStatus(ctx, client, u+"/leader")
	}

	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tIDENTITY\tLEADER\tHOLDER\tTOKEN\tBACKEND\tSINCE")
	holders := map[string]bool{}
	var leaders []leader.Status
	for _, v := range views {
		if v.err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\tunreachable: %v\n", v.url, v.err)
			continue
		}
		s := v.st
		holders[s.Holder] = true
		if s.IsLeader {
			leaders = append(leaders, s)
		}
		fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%d\t%s\t%s\n", v.url, s.Identity, s.IsLeader, orDash(s.Holder), s.FencingToken, s.Backend, s.Since.Format(time.RFC3339))
	}
	_ = tw.Flush()
	fmt.Fprintln(env.stdout)
	switch {
	case len(leaders) == 0:
		return fmt.Errorf("%w: no replica leads", errNoConsensus)
	case len(leaders) > 1:
		return fmt.Errorf("%w: %d replicas say they lead", errNoConsensus, len(leaders))
	case len(holders) > 1:
		fmt.Fprintf(env.stdout, "holder %s, fencing token %d\n", leaders[0].Identity, leaders[0].FencingToken)
		return fmt.Errorf("%w: the replicas disagree on the holder", errNoConsensus)
	}
	fmt.Fprintf(env.stdout, "holder %s, fencing token %d\n", leaders[0].Identity, leaders[0].FencingToken)
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fetchStatus(ctx context.Context, c *http.Client, url string) (leader.Status, error) {
	var s leader.Status
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
