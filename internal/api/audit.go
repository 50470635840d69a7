package api

import (
	"context"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/auth"
)

// auditTimeout bounds the write of an audit entry.
const auditTimeout = 10 * time.Second

// audit records a change made through the API: its action, target and
// detail, with the caller and its address. The change is made: a failure
// to record it is logged, not answered.
func (h *handler) audit(r *http.Request, action, target string, detail map[string]any) {
	if h.o.Auditor == nil {
		return
	}
	c := auth.CallerOf(r)
	// The change is made: a client that goes away now must not cancel
	// its record.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditTimeout)
	defer cancel()
	if err := auth.Audit(ctx, h.o.Auditor, c, action, target, detail); err != nil {
		h.log.Error("audit entry not written", zap.String("action", action), zap.String("target", target), zap.String("actor", c.Actor()), zap.Error(err))
	}
}
