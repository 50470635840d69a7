package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// load queues documents through both stations' APIs at a steady rate
// until stopped: the hub's through its front (the balancer), the
// partner's on its own listener. Each document has an Idempotency-Key and
// is retried until its API accepts it, so a document queued twice by a
// retry is still one message.
type load struct {
	rate   float64
	client *http.Client

	mu            sync.Mutex
	hubQueued     int
	partnerQueued int
	apiFailures   int
	// hubAccepted are the Message-IDs of the documents the hub's API
	// accepted (202, or 200 for a repeated Idempotency-Key).
	hubAccepted []string
}

func newLoad(rate float64) *load {
	return &load{rate: rate, client: &http.Client{Timeout: 10 * time.Second}}
}

// run queues documents until ctx ends; each side has a goroutine.
func (l *load) run(ctx context.Context, hubAPI, partnerAPI string) {
	var wg sync.WaitGroup
	wg.Go(func() { l.side(ctx, hubAPI, partnerID, "hub", &l.hubQueued) })
	wg.Go(func() { l.side(ctx, partnerAPI, hubID, "partner", &l.partnerQueued) })
	wg.Wait()
}

func (l *load) side(ctx context.Context, api, to, name string, queued *int) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / l.rate))
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if id, ok := l.queue(ctx, api, to, fmt.Sprintf("%s-%d", name, n), n); ok {
			l.mu.Lock()
			*queued++
			if name == "hub" {
				l.hubAccepted = append(l.hubAccepted, id)
			}
			l.mu.Unlock()
		}
	}
}

// queue posts one document until the API accepts it or ctx ends, and
// returns its Message-ID.
func (l *load) queue(ctx context.Context, api, to, key string, n int) (string, bool) {
	doc := fmt.Sprintf("ISA*00*          *00*          *ZZ*%-15s*ZZ*%-15s*261201*0101*U*00401*%09d*0*T*>~\nIEA*0*%09d~\n", key, to, n, n)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/api/v1/messages?partner="+url.QueryEscape(to), strings.NewReader(doc))
		if err != nil {
			return "", false
		}
		req.Header.Set("Authorization", "Bearer "+apiToken)
		req.Header.Set("Content-Type", "application/EDI-X12")
		req.Header.Set("Idempotency-Key", key)
		resp, err := l.client.Do(req)
		if err == nil {
			var q struct {
				MessageID string `json:"message_id"`
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if (resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK) && json.Unmarshal(body, &q) == nil {
				return q.MessageID, true
			}
		}
		l.mu.Lock()
		l.apiFailures++
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", false
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// counts returns the documents queued by each side and the API calls that
// had to be retried.
func (l *load) counts() (hub, partner, retried int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hubQueued, l.partnerQueued, l.apiFailures
}

// accepted returns the Message-IDs the hub's API accepted.
func (l *load) accepted() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.hubAccepted...)
}
