package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
)

// cancelFlags defines edihub cancel: it fails an outbound message still
// queued or retrying, directly in the database (EDIHUB_DATABASE_URL), like
// POST /api/v1/messages/{id}/cancel; edihub resend queues it again.
func cancelFlags(fs *flagSet) func(context.Context, *environment) error {
	var url, reason string
	fs.String(&url, "database-url", "", "PostgreSQL connection URL, e.g. postgres://edihub:secret@db:5432/edihub?sslmode=verify-full")
	fs.ActionString(&reason, "reason", "", "why, recorded in the message's error as \"cancelled: <reason>\"")
	return func(ctx context.Context, env *environment) error {
		if len(env.args) != 1 {
			return errors.New("cancel: want exactly one message ID argument after the flags: edihub cancel [-reason TEXT] ID (the id of GET /api/v1/messages)")
		}
		id, err := strconv.ParseInt(env.args[0], 10, 64)
		if err != nil || id < 1 {
			return fmt.Errorf("cancel: %q is not a message id: give the positive whole number of GET /api/v1/messages", env.args[0])
		}
		if len(reason) > api.MaxCancelReason {
			return fmt.Errorf("cancel: -reason is %d bytes long; at most %d", len(reason), api.MaxCancelReason)
		}
		if url == "" {
			return errors.New("no database: set EDIHUB_DATABASE_URL (or -database-url) to a PostgreSQL URL such as postgres://edihub:secret@localhost:5432/edihub")
		}
		store, err := openStore(ctx, zap.NewNop(), url, postgres.Options{MaxConns: 2}, false)
		if err != nil {
			return err
		}
		defer store.Close()
		m, err := store.CancelMessage(ctx, id, reason)
		switch {
		case errors.Is(err, hub.ErrMessageNotFound):
			return fmt.Errorf("cancel: no message %d", id)
		case err != nil:
			return fmt.Errorf("cancel: %w", err)
		}
		audit(ctx, store, env.stderr, "message.cancel", strconv.FormatInt(id, 10), map[string]any{"partner": m.Partner, "message_id": m.MessageID, "reason": reason})
		return printJSON(env.stdout, api.MessageView(m, "/api/v1"))
	}
}
