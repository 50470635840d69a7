package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/edihub/edihub/internal/auth"
)

// auditTimeout bounds the write of an audit entry.
const auditTimeout = 10 * time.Second

// cliCaller is who a change made from the command line is made by: an
// admin named cli:<os user>@<host> (osUser), with no address. Partner
// history, users' "created by" and the audit log name it alike.
func cliCaller() auth.Caller { return auth.CLICaller(osUser()) }

// audit records a change made from the command line in the audit log,
// through the path the API and the console take (auth.Audit), as
// cliCaller. The change is made: a failure to record it is reported on
// stderr, not returned, as the API answers the change it made.
func audit(ctx context.Context, a auth.Auditor, stderr io.Writer, action, target string, detail map[string]any) {
	// The change is made: an interrupt now must not cancel its record.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if err := auth.Audit(ctx, a, cliCaller(), action, target, detail); err != nil {
		fmt.Fprintf(stderr, "edihub: audit entry not written (the change was made): %v\n", err)
	}
}
