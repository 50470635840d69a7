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

// resendFlags defines edihub resend: it queues a failed or overdue outbound
// message again, same Message-ID and same stored bytes, directly in the
// database (EDIHUB_DATABASE_URL), like POST /api/v1/messages/{id}/resend;
// any replica's dispatcher sends it, woken by LISTEN/NOTIFY.
func resendFlags(fs *flagSet) func(context.Context, *environment) error {
	var url string
	fs.String(&url, "database-url", "", "PostgreSQL connection URL, e.g. postgres://edihub:secret@db:5432/edihub?sslmode=verify-full")
	return func(ctx context.Context, env *environment) error {
		if len(env.args) != 1 {
			return errors.New("resend: want exactly one message ID argument after the flags: edihub resend ID (the id of GET /api/v1/messages)")
		}
		id, err := strconv.ParseInt(env.args[0], 10, 64)
		if err != nil || id < 1 {
			return fmt.Errorf("resend: %q is not a message id: give the positive whole number of GET /api/v1/messages", env.args[0])
		}
		if url == "" {
			return errors.New("no database: set EDIHUB_DATABASE_URL (or -database-url) to a PostgreSQL URL such as postgres://edihub:secret@localhost:5432/edihub")
		}
		store, err := openStore(ctx, zap.NewNop(), url, postgres.Options{MaxConns: 2}, false)
		if err != nil {
			return err
		}
		defer store.Close()
		m, err := store.ResendMessage(ctx, id)
		switch {
		case errors.Is(err, hub.ErrMessageNotFound):
			return fmt.Errorf("resend: no message %d", id)
		case err != nil:
			return fmt.Errorf("resend: %w", err)
		}
		audit(ctx, store, env.stderr, "message.resend", strconv.FormatInt(id, 10), map[string]any{"partner": m.Partner, "message_id": m.MessageID})
		return printJSON(env.stdout, api.MessageView(m, "/api/v1"))
	}
}
